// status's view of a process's profile from its control answer: bytes in
// use at its newest jemalloc dump, scaled as report scales them, or why it
// does not say. In the dump library: the static binary's status reads it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/tree_control.h"

namespace memprofile {

ProfileInUse profile_in_use(const nlohmann::json& reply, const std::string& dir);

}  // namespace memprofile
