// A std::streambuf that gathers what is written into a block of its own and
// hands each full block to a sink: the output files of AtomicFile (a file
// descriptor, for fsync and errno) and of gzip traces (zlib) share it.
#pragma once

#include <streambuf>
#include <vector>

namespace strata {

class BlockStreambuf : public std::streambuf {
 public:
  explicit BlockStreambuf(size_t blockBytes) : buffer_(blockBytes) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  BlockStreambuf(const BlockStreambuf&) = delete;
  BlockStreambuf& operator=(const BlockStreambuf&) = delete;

 protected:
  // Writes `n` bytes at `p` whole to the sink; false when it failed (the
  // stream then fails: badbit).
  virtual bool put(const char* p, size_t n) = 0;

  // Hands what is gathered to the sink; false when that failed.
  bool drain() {
    const auto n = static_cast<size_t>(pptr() - pbase());
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return n == 0 || put(buffer_.data(), n);
  }

  int overflow(int ch) override {
    if (!drain())
      return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return drain() ? 0 : -1; }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    // A block or more (the trace writer's large writes) goes to the sink
    // without a copy.
    if (static_cast<size_t>(n) >= buffer_.size()) {
      if (!drain() || !put(s, static_cast<size_t>(n)))
        return 0;
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }

 private:
  std::vector<char> buffer_;
};

}  // namespace strata
