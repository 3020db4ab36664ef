// tlptm — cell<T>: an element of a persistent container, and what the containers share.
//
// A redo-log PTM cannot hand out a plain `T&` to a pool object: the running transaction's own
// stores wait in its write-set until commit, so the bytes in place are not what it sees. The
// containers therefore hand out `cell<T>&`: a tlptm::p<T> (every store is transactional, every
// read sees the transaction's own stores) whose copies also read transactionally, so that the
// standard algorithms that make a temporary (`std::sort`, `std::swap`, `std::ranges::sort`)
// work on it inside a transaction. Arrays of cells are contiguous, so `cell<T>*` is a
// contiguous iterator.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <tlptm/alloc.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/p.hpp>
#include <tlptm/transaction.hpp>

namespace tlptm {

/// An element of a persistent container: a p<T> whose copy constructor and copy assignment read
/// the source transactionally (p<T>'s own copy constructor copies bytes). Same size and
/// alignment as T.
///
/// `cell<T>` converts to T (a read), takes `= T` (a transactional store) and the compound
/// assignments of p<T>. It has no constructor from T on purpose: with one, `cell<int>` and
/// `int` would convert into each other, they would have no common reference, and the
/// `std::ranges` algorithms (`ranges::find(v, 3)`, `ranges::equal(v, w)`) would not compile.
/// Reads outside a transaction read the pool directly; stores outside one throw
/// tx_scope_error.
template <class T> class cell : public p<T> {
public:
    using value_type = T;

    cell() = default;
    /// A copy (in volatile memory, e.g. the temporary of std::swap) of the value `o` has as
    /// the running transaction sees it.
    cell(const cell& o) : p<T>(o.get()) {}
    /// Transactional store of the value of `o`.
    /// @throw tx_scope_error outside a transaction
    cell& operator=(const cell& o) {
        p<T>::operator=(o.get());
        return *this;
    }
    /// Transactional store of v.
    /// @throw tx_scope_error outside a transaction
    cell& operator=(const T& v) {
        p<T>::operator=(v);
        return *this;
    }
};

static_assert(sizeof(cell<std::uint64_t>) == sizeof(std::uint64_t));

namespace detail {

/// True if the calling thread runs a transaction (on any pool).
inline bool in_transaction() noexcept {
    return current_tx != nullptr;
}

/// The running transaction, for an operation that stores: containers throw, as p<T> stores do,
/// when called outside one.
/// @throw tx_scope_error no transaction is running
inline tx mutating_tx(const char* operation) {
    if (!current_tx)
        throw tx_scope_error(std::string("tlptm: ") + operation +
                             " outside a transaction; wrap it in tlptm::atomic");
    return tx(*current_tx);
}

/// Reads n bytes at src (pool memory) into dst: through the running transaction if there is
/// one (its own stores included, the read validated), else word by word with atomic loads
/// (like p<T> outside a transaction: no snapshot across words).
inline void load_bytes(void* dst, const void* src, std::size_t n) {
    if (n == 0)
        return;
    if (current_tx) {
        tx(*current_tx).read(dst, src, n);
        return;
    }
    auto* out = static_cast<unsigned char*>(dst);
    auto at = reinterpret_cast<std::uintptr_t>(src);
    std::uintptr_t word = at & ~std::uintptr_t{7};
    std::size_t skip = at - word;
    for (std::size_t done = 0; done < n; word += 8, skip = 0) {
        std::size_t take = std::min<std::size_t>(8 - skip, n - done);
        std::uint64_t v =
            __atomic_load_n(reinterpret_cast<const std::uint64_t*>(word), __ATOMIC_ACQUIRE);
        std::memcpy(out + done, reinterpret_cast<const unsigned char*>(&v) + skip, take);
        done += take;
    }
}

/// Bytes of `count` elements of `size` bytes, or throws std::length_error.
inline std::size_t checked_bytes(std::size_t count, std::size_t size, const char* container) {
    if (size != 0 && count > (std::size_t{1} << 48) / size)
        throw std::length_error(std::string(container) + ": size exceeds max_size()");
    return count * size;
}

} // namespace detail
} // namespace tlptm
