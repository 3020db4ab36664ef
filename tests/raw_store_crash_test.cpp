// Raw stores into a block the transaction allocated (std::memcpy into tx.alloc) are made
// durable at commit, in every log mode: the commit flushes every line of every block it
// allocated before its commit point, as PMDK does for objects allocated in a transaction.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "test_util.hpp"

namespace {

using tlptm_test::durable_lines_policy;
using tlptm_test::temp_path;

struct root {
    tlptm::p<std::uint8_t*> blob;
};

} // namespace

TEST_CASE("std::memcpy into a block of tx.alloc is durable once the transaction returns") {
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::cblo,
                                 tlptm::log_mode::aalo, tlptm::log_mode::tlptm}) {
        const std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        temp_path path("raw-store");
        {
            auto pool = tlptm::pool::create(path, tlptm_test::small_options(mode));
            pool.root<root>();
        }
        durable_lines_policy policy(tlptm_test::read_file(path));
        auto opt = tlptm_test::small_options(mode);
        opt.policy = &policy;
        std::vector<std::uint8_t> src(4096);
        for (std::size_t i = 0; i < src.size(); ++i)
            src[i] = static_cast<std::uint8_t>(i * 31 + 7);
        std::uint64_t blob_offset = 0;
        std::vector<std::uint8_t> crash_image;
        {
            auto pool = tlptm::pool::open(path, opt);
            policy.attach(static_cast<const std::uint8_t*>(pool.base()));
            auto* r = pool.root<root>();
            auto before = pool.stats();
            tlptm::atomic(pool, [&](tlptm::tx& tx) {
                auto* b = static_cast<std::uint8_t*>(tx.alloc(src.size()));
                std::memcpy(b, src.data(), src.size()); // no p<T>, no tx.write
                r->blob = b;
            });
            // Every line of the 4 KiB block was flushed before the commit point.
            CHECK((pool.stats() - before).flushed_lines >= src.size() / 64);
            blob_offset =
                static_cast<std::uint64_t>(r->blob.get() - static_cast<std::uint8_t*>(pool.base()));
            // A crash now: the file holds only what x86 guarantees.
            crash_image = policy.image();
        }
        tlptm_test::write_file(path, crash_image);
        auto pool = tlptm::pool::open(path, tlptm_test::small_options(mode));
        auto* r = pool.root<root>();
        REQUIRE(r->blob.get() != nullptr); // the committed pointer is there...
        const auto* b = static_cast<const std::uint8_t*>(pool.base()) + blob_offset;
        CHECK(r->blob.get() == b);
        CHECK(std::memcmp(b, src.data(), src.size()) == 0); // ...and so is what it points to
    }
}
