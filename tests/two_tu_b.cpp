#include "two_tu.hpp"

bool two_tu_b_in_transaction() {
    return tlptm::detail::current_tx != nullptr;
}
const void* two_tu_b_registry() {
    return &tlptm::detail::this_thread_registry;
}
