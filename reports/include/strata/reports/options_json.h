// A scenario's options as JSON, the same object in every JSON strata writes
// (predict, compare, sweep and run estimates; the report's option sets).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "strata/model/strategy.h"

namespace strata::reports {

inline nlohmann::ordered_json optionsJson(const StrategyOptions& o) {
  return {{"overlap", o.overlap},
          {"fc_update", std::string(toString(o.fcUpdate))},
          {"segment_bytes", o.segment.value()},
          {"bucket_bytes", o.bucket.value()},
          {"element", std::string(toString(o.element))},
          {"optimizer", std::string(toString(o.optimizer))},
          {"allreduce", std::string(toString(o.gradientSync))},
          {"conv_sync", std::string(toString(o.convSync))},
          {"ps_priority", std::string(toString(o.psPriority))},
          {"staleness", o.staleness},
          {"ps_servers", o.psServers},
          {"ps_node", o.psNode},
          {"threads_per_worker", o.threadsPerWorker}};
}

}  // namespace strata::reports
