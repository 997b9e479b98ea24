// Strongly typed physical quantities: seconds, bytes, bytes/s, FLOPs, FLOP/s.
//
// The cost model multiplies and divides these all day; a typed wrapper makes a
// bytes-over-FLOP/s mistake a compile error instead of a wrong prediction.
#pragma once

#include <compare>

namespace strata {

// A double with a unit tag. Same-unit arithmetic keeps the unit; the ratio of
// two same-unit quantities is a plain double.
template <class Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double value) : value_(value) {}

  constexpr double value() const { return value_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(value_ + o.value_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value_ - o.value_); }
  constexpr Quantity operator*(double k) const { return Quantity(value_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(value_ / k); }
  constexpr double operator/(Quantity o) const { return value_ / o.value_; }
  constexpr Quantity& operator+=(Quantity o) {
    value_ += o.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value_ -= o.value_;
    return *this;
  }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double value_ = 0.0;
};

template <class Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) {
  return q * k;
}

struct SecondsTag {};
struct BytesTag {};
struct BytesPerSecondTag {};
struct FlopsTag {};
struct FlopsPerSecondTag {};

using Seconds = Quantity<SecondsTag>;
using Bytes = Quantity<BytesTag>;
using BytesPerSecond = Quantity<BytesPerSecondTag>;
using Flops = Quantity<FlopsTag>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;

constexpr Seconds operator/(Bytes b, BytesPerSecond r) {
  return Seconds(b.value() / r.value());
}
constexpr Seconds operator/(Flops f, FlopsPerSecond r) {
  return Seconds(f.value() / r.value());
}
constexpr Bytes operator*(BytesPerSecond r, Seconds t) {
  return Bytes(r.value() * t.value());
}
constexpr BytesPerSecond operator/(Bytes b, Seconds t) {
  return BytesPerSecond(b.value() / t.value());
}

template <class Tag>
constexpr Quantity<Tag> max(Quantity<Tag> a, Quantity<Tag> b) {
  return a < b ? b : a;
}
template <class Tag>
constexpr Quantity<Tag> min(Quantity<Tag> a, Quantity<Tag> b) {
  return b < a ? b : a;
}

}  // namespace strata
