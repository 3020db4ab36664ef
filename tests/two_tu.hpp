#pragma once
#include <cstdint>

#include <tlptm/tlptm.hpp>

struct two_tu_root {
    tlptm::p<std::uint64_t> value;
};
void two_tu_a_store(two_tu_root* r, std::uint64_t v);
const void* two_tu_a_registry();
bool two_tu_b_in_transaction();
const void* two_tu_b_registry();
