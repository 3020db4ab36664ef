// tlptm — p<T>: a persistent field whose stores are transactional.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <tlptm/detail/pool_state.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/transaction.hpp>

namespace tlptm {

/// A field of type T that lives in a pool, aligned to `Align` (by default T's alignment). Stores go
/// through the running transaction (they are buffered and logged, and become visible and durable at
/// commit); reads inside a transaction see the transaction's own stores. Any trivially copyable T,
/// of any size and alignment (sub-word, multi-word fields). Same size as T, and the same alignment
/// unless `Align` says otherwise: a field at an unaligned place (inside a `#pragma pack(1)` struct)
/// must be declared `p<T, 1>`, since an object may not sit below its type's alignment.
///
/// Reads outside a transaction read the pool directly, word by word (no snapshot across words:
/// use a transaction to read a multi-word value that other threads may be writing).
/// Stores outside a transaction throw tx_scope_error.
template <class T, std::size_t Align = alignof(T)> class p {
    static_assert(std::is_trivially_copyable_v<T>,
                  "tlptm::p<T> needs a trivially copyable T (its bytes are logged and replayed)");
    static_assert(Align > 0 && (Align & (Align - 1)) == 0 && Align <= alignof(T),
                  "tlptm::p<T, Align>: Align must be a power of two no larger than alignof(T)");

public:
    p() = default;
    /// Initialises the bytes directly (for objects built outside the pool).
    p(const T& v) noexcept { std::memcpy(v_, &v, sizeof(T)); }
    p(const p&) = default;

    /// Transactional store of v.
    /// @throw tx_scope_error outside a transaction, or the field is not in the pool's heap
    [[gnu::always_inline]] p& operator=(const T& v) {
        detail::thread_slot* s = detail::current_tx;
        if (!s)
            throw tx_scope_error("tlptm: store to a tlptm::p<T> outside a transaction; wrap it "
                                 "in tlptm::atomic");
        if constexpr (word_sized) {
            if (detail::tx_write_word(*s, v_, std::bit_cast<std::uint64_t>(v)))
                return *this;
        }
        detail::tx_write(*s, v_, &v, sizeof(T));
        return *this;
    }
    p& operator=(const p& o) { return *this = o.get(); }

    /// The value as the running transaction sees it (or the pool's value outside one).
    [[gnu::always_inline]] T get() const {
        std::array<std::byte, sizeof(T)> buf;
        if (detail::thread_slot* s = detail::current_tx) {
            if constexpr (word_sized) {
                std::uint64_t w;
                if (detail::tx_read_word(*s, v_, w))
                    return std::bit_cast<T>(w);
            }
            detail::tx_read(*s, buf.data(), v_, sizeof(T));
        } else
            detail::plain_read(buf.data(), v_, sizeof(T));
        return std::bit_cast<T>(buf);
    }
    [[gnu::always_inline]] operator T() const { return get(); }

    /// Member access through a persistent pointer field.
    T operator->() const requires std::is_pointer_v<T> { return get(); }
    decltype(auto) operator*() const requires std::is_pointer_v<T> { return *get(); }

    // Compound assignment: read (own writes included), compute, store.
    template <class U> p& operator+=(const U& u) requires requires(T a, U b) { a + b; }
    { return *this = static_cast<T>(get() + u); }
    template <class U> p& operator-=(const U& u) requires requires(T a, U b) { a - b; }
    { return *this = static_cast<T>(get() - u); }
    template <class U> p& operator*=(const U& u) requires requires(T a, U b) { a* b; }
    { return *this = static_cast<T>(get() * u); }
    template <class U> p& operator/=(const U& u) requires requires(T a, U b) { a / b; }
    { return *this = static_cast<T>(get() / u); }
    template <class U> p& operator%=(const U& u) requires requires(T a, U b) { a % b; }
    { return *this = static_cast<T>(get() % u); }
    template <class U> p& operator&=(const U& u) requires requires(T a, U b) { a& b; }
    { return *this = static_cast<T>(get() & u); }
    template <class U> p& operator|=(const U& u) requires requires(T a, U b) { a | b; }
    { return *this = static_cast<T>(get() | u); }
    template <class U> p& operator^=(const U& u) requires requires(T a, U b) { a ^ b; }
    { return *this = static_cast<T>(get() ^ u); }
    template <class U> p& operator<<=(const U& u) requires requires(T a, U b) { a << b; }
    { return *this = static_cast<T>(get() << u); }
    template <class U> p& operator>>=(const U& u) requires requires(T a, U b) { a >> b; }
    { return *this = static_cast<T>(get() >> u); }

    p& operator++() requires requires(T a) { ++a; }
    {
        T v = get();
        return *this = ++v;
    }
    p& operator--() requires requires(T a) { --a; }
    {
        T v = get();
        return *this = --v;
    }
    T operator++(int) requires requires(T a) { a++; }
    {
        T v = get();
        T r = v;
        *this = ++v;
        return r;
    }
    T operator--(int) requires requires(T a) { a--; }
    {
        T v = get();
        T r = v;
        *this = --v;
        return r;
    }

private:
    /// One aligned word: reads and stores take the one-word fast paths first.
    static constexpr bool word_sized = sizeof(T) == 8 && Align >= 8;

    alignas(Align) unsigned char v_[sizeof(T)]; // T's bytes, as they are logged and replayed
};

} // namespace tlptm
