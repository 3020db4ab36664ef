#include "two_tu.hpp"

void two_tu_a_store(two_tu_root* r, std::uint64_t v) {
    r->value = v;
}
const void* two_tu_a_registry() {
    return &tlptm::detail::this_thread_registry;
}
