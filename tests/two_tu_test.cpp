// Two translation units include the library: inline globals (the thread registry, the current
// transaction) must be one object, so a transaction begun in one unit is seen by the other.
#include <doctest/doctest.h>

#include "test_util.hpp"
#include "two_tu.hpp"

TEST_CASE("the library's globals are shared between translation units") {
    tlptm_test::temp_path path("twotu");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<two_tu_root>();
    tlptm::atomic(pool, [&] {
        two_tu_a_store(r, 5); // stores through the transaction started in this unit
        CHECK(two_tu_b_in_transaction());
        CHECK(r->value.get() == 5);
    });
    CHECK_FALSE(two_tu_b_in_transaction());
    CHECK(r->value.get() == 5);
    CHECK(two_tu_a_registry() == two_tu_b_registry());
}
