// The user guide's first snippets (docs/guide.md): opening a pool at startup, what is
// transactional, reading, durability. Run: guide_basics [POOL] (default /dev/shm/...).
#include <tlptm/tlptm.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

// guide: begin root
struct account {
    tlptm::p<std::uint64_t> id;
    tlptm::p<std::int64_t> balance;
};

struct bank {                    // the pool's root
    tlptm::p<account*> accounts; // an array of tlptm::p fields in one block
    tlptm::p<std::uint64_t> count;
    std::int64_t fees;             // a plain field: transactional only through tx.load/store
    std::uint64_t opened_this_run; // a plain field written directly: NOT transactional
};
// guide: end

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : "/dev/shm/tlptm-guide-basics.pool";

    // guide: begin open
    tlptm::pool_options opt;
    opt.size = std::size_t{64} << 20;              // the file's size, fixed at creation
    opt.layout = "bank-v1";                        // the pool's identity
    opt.durability = tlptm::durability::automatic; // CPU flushes on pmem, msync elsewhere
    tlptm::pool pool = tlptm::pool::open_or_create(path, opt); // runs recovery
    const tlptm::recovery_report& r = pool.last_recovery();
    if (r.entries_replayed > 0)
        std::printf("recovered %zu transactions after a crash\n", r.entries_replayed);
    bank* b = pool.root<bank>(); // zero-filled at creation
    // guide: end

    // guide: begin transaction
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        if (b->accounts.get() == nullptr) {
            auto* a = static_cast<account*>(tx.alloc(16 * sizeof(account)));
            for (int i = 0; i < 16; ++i) {
                a[i].id = static_cast<std::uint64_t>(i); // p<T> store: transactional
                a[i].balance = 100;
            }
            b->accounts = a;
            b->count = 16;
        }
        account* a = b->accounts;
        a[0].balance -= 30; // both or neither
        a[1].balance += 29;
        tx.store(&b->fees, tx.load(&b->fees) + 1); // the explicit form, for plain fields
    });
    // guide: end

    // guide: begin read
    std::int64_t total = tlptm::atomic(pool, [&] {
        std::int64_t sum = 0;
        for (std::uint64_t i = 0; i < b->count; ++i)
            sum += b->accounts.get()[i].balance;
        return sum; // read-only: no log, no fence
    });
    std::int64_t first = b->accounts.get()[0].balance; // outside a transaction: a plain read
    // guide: end

    // guide: begin plain
    b->opened_this_run += 1; // a plain store: not logged, not flushed, lost or kept by chance
    // A p<T> store outside a transaction, `b->count = 5`, throws tlptm::tx_scope_error.
    // guide: end

    std::printf("total %lld, first %lld\n", static_cast<long long>(total),
                static_cast<long long>(first));
    return total + b->fees == 16 * 100 ? 0 : 1;
}
