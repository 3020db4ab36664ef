// tlptm — vector<T>: a persistent dynamic array of trivially copyable elements.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <ranges>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tlptm/alloc.hpp>
#include <tlptm/containers/cell.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/p.hpp>
#include <tlptm/transaction.hpp>

namespace tlptm {

/// A dynamic array in a tlptm pool, after std::vector. It lives in the pool like any other
/// object (a field of the root, or of an object made with tlptm::make); a zero-filled vector
/// is empty. Its header (pointer, size, capacity) is made of p<> fields and its elements are
/// cell<T>s, so every store is transactional.
///
/// Concurrency: every mutating member must be called inside a transaction (tlptm::atomic) on
/// the vector's pool and throws tx_scope_error outside one; reads are allowed outside a
/// transaction (they read the pool directly, without a snapshot, as p<T> does). Any number of
/// threads may use one vector inside their transactions: the STM isolates them.
///
/// Growth allocates the new buffer in the running transaction and copies the elements into it
/// with tx.memcpy: in log modes aalo and tlptm those stores go to memory the transaction
/// allocated, so they are written in place and flushed, never logged; the old buffer is freed
/// in the same transaction.
///
/// Exception guarantees: the standard's, within the running transaction (an operation that
/// throws has made no store: allocations come first). An exception that leaves tlptm::atomic
/// aborts the whole transaction anyway.
///
/// Departures from std::vector (docs/containers.md):
/// - `reference` is `cell<T>&` and the iterators are `cell<T>*` (contiguous; their value type
///   is cell<T>): a redo log cannot expose a plain `T&`. `v[i] = x`, `T x = v[i]`,
///   `v[i] += 1`, the <algorithm> and <ranges> algorithms work; `data()` is a `cell<T>*`.
/// - No allocator parameter, no copy or move construction (a vector is a pool object, not a
///   value): use assign() or `=` with an initializer list; swap() swaps two vectors' contents.
/// - No destructor runs on pool objects: destroy() (or tlptm::destroy(vector*)) frees the
///   buffer.
/// - pop_back() on an empty vector throws std::out_of_range (the standard leaves it
///   undefined).
/// - A mutating call on a vector of another pool than the running transaction's throws
///   tx_scope_error (from its first store; nothing is kept, as the transaction aborts).
/// - max_size() is 2^48 bytes / sizeof(T).
template <class T> class vector {
    static_assert(std::is_trivially_copyable_v<T>,
                  "tlptm::vector<T> needs a trivially copyable T (its bytes are logged and "
                  "replayed); use tlptm::string for text");
    static_assert(alignof(T) <= 16, "tlptm::vector<T>: pool blocks are 16-byte aligned");

public:
    using value_type = T;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using reference = cell<T>&;
    using const_reference = const cell<T>&;
    using pointer = cell<T>*;
    using const_pointer = const cell<T>*;
    using iterator = cell<T>*;
    using const_iterator = const cell<T>*;
    using reverse_iterator = std::reverse_iterator<iterator>;
    using const_reverse_iterator = std::reverse_iterator<const_iterator>;

    /// An empty vector (all fields zero, as in a zero-filled root).
    vector() = default;
    vector(const vector&) = delete;
    vector& operator=(const vector&) = delete;

    /// Replaces the contents with `il`.
    /// @throw tx_scope_error outside a transaction
    /// @throw out_of_memory the pool has no room
    vector& operator=(std::initializer_list<T> il) {
        assign(il);
        return *this;
    }

    // ---- element access -----------------------------------------------------------------

    /// Element i, bounds-checked.
    /// @throw std::out_of_range i >= size()
    reference at(size_type i) { return data()[check(i)]; }
    const_reference at(size_type i) const { return data()[check(i)]; }
    /// Element i (i < size() is the caller's duty, as for std::vector).
    reference operator[](size_type i) { return data()[i]; }
    const_reference operator[](size_type i) const { return data()[i]; }
    reference front() { return data()[0]; }
    const_reference front() const { return data()[0]; }
    reference back() { return data()[size() - 1]; }
    const_reference back() const { return data()[size() - 1]; }
    /// The elements (nullptr while nothing was ever allocated).
    pointer data() { return data_.get(); }
    const_pointer data() const { return data_.get(); }

    // ---- iterators ----------------------------------------------------------------------

    iterator begin() { return data(); }
    const_iterator begin() const { return data(); }
    const_iterator cbegin() const { return data(); }
    iterator end() { return data() + size(); }
    const_iterator end() const { return data() + size(); }
    const_iterator cend() const { return end(); }
    reverse_iterator rbegin() { return reverse_iterator(end()); }
    const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
    const_reverse_iterator crbegin() const { return rbegin(); }
    reverse_iterator rend() { return reverse_iterator(begin()); }
    const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
    const_reverse_iterator crend() const { return rend(); }

    // ---- capacity -----------------------------------------------------------------------

    bool empty() const { return size() == 0; }
    size_type size() const { return size_.get(); }
    size_type capacity() const { return capacity_.get(); }
    static constexpr size_type max_size() noexcept { return (size_type{1} << 48) / sizeof(T); }

    /// Makes room for n elements (one allocation, the elements copied, the old buffer freed).
    /// @throw std::length_error n > max_size()
    /// @throw tx_scope_error outside a transaction
    /// @throw out_of_memory the pool has no room
    void reserve(size_type n) {
        tx t = detail::mutating_tx("tlptm::vector::reserve");
        if (n > max_size())
            throw std::length_error("tlptm::vector::reserve: n exceeds max_size()");
        if (n > capacity())
            reallocate(t, n, size());
    }

    /// Shrinks the buffer to size() elements (frees it if the vector is empty).
    /// @throw tx_scope_error outside a transaction
    /// @throw out_of_memory the pool has no room for the smaller buffer
    void shrink_to_fit() {
        tx t = detail::mutating_tx("tlptm::vector::shrink_to_fit");
        size_type n = size();
        if (capacity() == n)
            return;
        if (n == 0) {
            t.free(data());
            data_ = nullptr;
            capacity_ = 0;
            return;
        }
        reallocate(t, n, n);
    }

    // ---- modifiers ----------------------------------------------------------------------

    /// Removes every element; the capacity stays (as for std::vector).
    /// @throw tx_scope_error outside a transaction
    void clear() {
        detail::mutating_tx("tlptm::vector::clear");
        if (size() != 0)
            size_ = 0;
    }

    /// Frees the buffer and leaves the vector empty with capacity 0: call it before freeing
    /// the object that holds the vector (pool objects have no destructors).
    /// @throw tx_scope_error outside a transaction
    void destroy() {
        tx t = detail::mutating_tx("tlptm::vector::destroy");
        if (pointer d = data()) {
            t.free(d);
            data_ = nullptr;
        }
        if (size() != 0)
            size_ = 0;
        if (capacity() != 0)
            capacity_ = 0;
    }

    /// Appends v.
    /// @throw tx_scope_error outside a transaction
    /// @throw out_of_memory growth needs room the pool does not have
    void push_back(const T& v) {
        tx t = detail::mutating_tx("tlptm::vector::push_back");
        size_type n = size();
        if (n == capacity()) {
            insert_raw(t, n, &v, 1);
            return;
        }
        t.write(data() + n, &v, sizeof(T));
        size_ = n + 1;
    }

    /// Appends T(args...) (or T{args...} for aggregates) and returns it.
    template <class... Args> reference emplace_back(Args&&... args) {
        push_back(make_value(std::forward<Args>(args)...));
        return back();
    }

    /// Removes the last element.
    /// @throw std::out_of_range the vector is empty
    /// @throw tx_scope_error outside a transaction
    void pop_back() {
        detail::mutating_tx("tlptm::vector::pop_back");
        size_type n = size();
        if (n == 0)
            throw std::out_of_range("tlptm::vector::pop_back: the vector is empty");
        size_ = n - 1;
    }

    /// Inserts v before pos; returns an iterator to it.
    iterator insert(const_iterator pos, const T& v) { return insert(pos, size_type{1}, v); }

    /// Inserts count copies of v before pos; returns an iterator to the first (or pos).
    iterator insert(const_iterator pos, size_type count, const T& v) {
        tx t = detail::mutating_tx("tlptm::vector::insert");
        std::vector<T> copies(count, v);
        return insert_raw(t, index_of(pos), copies.data(), count);
    }

    /// Inserts [first, last) before pos (which may point into this vector); returns an
    /// iterator to the first inserted element (or pos).
    template <std::input_iterator It> iterator insert(const_iterator pos, It first, It last) {
        tx t = detail::mutating_tx("tlptm::vector::insert");
        size_type at = index_of(pos);
        std::vector<T> items = materialise(first, last);
        return insert_raw(t, at, items.data(), items.size());
    }

    iterator insert(const_iterator pos, std::initializer_list<T> il) {
        tx t = detail::mutating_tx("tlptm::vector::insert");
        return insert_raw(t, index_of(pos), il.begin(), il.size());
    }

    /// Inserts the elements of range r before pos (C++23 insert_range).
    template <std::ranges::input_range R> iterator insert_range(const_iterator pos, R&& r) {
        return insert(pos, std::ranges::begin(r), std::ranges::end(r));
    }

    /// Appends the elements of range r (C++23 append_range).
    template <std::ranges::input_range R> void append_range(R&& r) {
        insert(end(), std::ranges::begin(r), std::ranges::end(r));
    }

    /// Inserts T(args...) before pos.
    template <class... Args> iterator emplace(const_iterator pos, Args&&... args) {
        return insert(pos, make_value(std::forward<Args>(args)...));
    }

    /// Removes the element at pos; returns the iterator that follows it.
    iterator erase(const_iterator pos) { return erase(pos, pos + 1); }

    /// Removes [first, last); returns an iterator to the element that followed them.
    /// @throw std::out_of_range the range is not within the vector
    iterator erase(const_iterator first, const_iterator last) {
        tx t = detail::mutating_tx("tlptm::vector::erase");
        size_type n = size();
        size_type f = index_of(first);
        if (last < first || static_cast<size_type>(last - data()) > n)
            throw std::out_of_range("tlptm::vector::erase: range outside the vector");
        size_type l = static_cast<size_type>(last - data());
        if (f == l)
            return data() + f;
        if (l < n)
            t.memcpy(data() + f, data() + l, (n - l) * sizeof(T));
        size_ = n - (l - f);
        return data() + f;
    }

    /// Grows (value-initialised elements) or shrinks to n elements.
    void resize(size_type n) { resize(n, T{}); }

    /// Grows (copies of v) or shrinks to n elements.
    /// @throw std::length_error n > max_size()
    void resize(size_type n, const T& v) {
        tx t = detail::mutating_tx("tlptm::vector::resize");
        size_type have = size();
        if (n > max_size())
            throw std::length_error("tlptm::vector::resize: n exceeds max_size()");
        if (n <= have) {
            if (n != have)
                size_ = n;
            return;
        }
        std::vector<T> copies(n - have, v);
        insert_raw(t, have, copies.data(), copies.size());
    }

    /// Replaces the contents with count copies of v.
    void assign(size_type count, const T& v) {
        tx t = detail::mutating_tx("tlptm::vector::assign");
        std::vector<T> copies(count, v);
        assign_raw(t, copies.data(), count);
    }

    /// Replaces the contents with [first, last) (which may overlap this vector).
    template <std::input_iterator It> void assign(It first, It last) {
        tx t = detail::mutating_tx("tlptm::vector::assign");
        std::vector<T> items = materialise(first, last);
        assign_raw(t, items.data(), items.size());
    }

    void assign(std::initializer_list<T> il) {
        tx t = detail::mutating_tx("tlptm::vector::assign");
        assign_raw(t, il.begin(), il.size());
    }

    /// Replaces the contents with the elements of range r (C++23 assign_range).
    template <std::ranges::input_range R> void assign_range(R&& r) {
        assign(std::ranges::begin(r), std::ranges::end(r));
    }

    /// Exchanges the contents of two vectors of the same pool (three header words each).
    void swap(vector& o) {
        detail::mutating_tx("tlptm::vector::swap");
        pointer d = data_.get();
        size_type n = size_.get(), c = capacity_.get();
        data_ = o.data_.get();
        size_ = o.size_.get();
        capacity_ = o.capacity_.get();
        o.data_ = d;
        o.size_ = n;
        o.capacity_ = c;
    }

    /// The elements, copied into a std::vector with one transactional read.
    std::vector<T> to_std() const {
        std::vector<T> out(size());
        detail::load_bytes(out.data(), data(), out.size() * sizeof(T));
        return out;
    }

    friend bool operator==(const vector& a, const vector& b) requires std::equality_comparable<T> {
        return a.to_std() == b.to_std();
    }
    friend auto operator<=>(const vector& a,
                            const vector& b) requires std::three_way_comparable<T> {
        std::vector<T> x = a.to_std(), y = b.to_std();
        return std::lexicographical_compare_three_way(x.begin(), x.end(), y.begin(), y.end());
    }

private:
    size_type check(size_type i) const {
        size_type n = size();
        if (i >= n)
            throw std::out_of_range("tlptm::vector::at: index " + std::to_string(i) + " >= size " +
                                    std::to_string(n));
        return i;
    }

    size_type index_of(const_iterator pos) const {
        const_pointer d = data();
        if (pos < d || static_cast<size_type>(pos - d) > size())
            throw std::out_of_range("tlptm::vector: iterator outside the vector");
        return static_cast<size_type>(pos - d);
    }

    template <class... Args> static T make_value(Args&&... args) {
        if constexpr (std::is_constructible_v<T, Args...>)
            return T(std::forward<Args>(args)...);
        else
            return T{std::forward<Args>(args)...};
    }

    /// Copies an input range into volatile memory first: it may alias this vector, and a
    /// single-pass range must be read before anything is stored.
    template <class It> static std::vector<T> materialise(It first, It last) {
        std::vector<T> out;
        if constexpr (std::forward_iterator<It>)
            out.reserve(static_cast<std::size_t>(std::distance(first, last)));
        for (; first != last; ++first)
            out.push_back(static_cast<T>(*first));
        return out;
    }

    /// The capacity after growing to hold `need` elements: doubling (amortised O(1) appends),
    /// at least 32 bytes' worth.
    size_type grown(size_type need) const {
        if (need > max_size())
            throw std::length_error("tlptm::vector: size exceeds max_size()");
        size_type c = std::max<size_type>(capacity() * 2, std::max<size_type>(32 / sizeof(T), 1));
        return std::min(std::max(c, need), max_size());
    }

    /// Moves the first `keep` elements into a new buffer of `cap` elements and frees the old.
    /// The allocation comes first: if it throws, nothing was stored.
    void reallocate(tx& t, size_type cap, size_type keep) {
        pointer old = data();
        auto* fresh =
            static_cast<pointer>(t.alloc(detail::checked_bytes(cap, sizeof(T), "vector")));
        if (keep != 0) // AALO: stores into the new buffer are written in place, not logged
            t.memcpy(fresh, old, keep * sizeof(T));
        data_ = fresh;
        capacity_ = cap;
        if (old)
            t.free(old);
    }

    /// Inserts `count` elements from volatile memory before index `at`.
    iterator insert_raw(tx& t, size_type at, const T* src, size_type count) {
        size_type n = size();
        if (count == 0)
            return data() + at;
        if (count > max_size() - n)
            throw std::length_error("tlptm::vector::insert: size exceeds max_size()");
        if (n + count > capacity()) {
            // A new buffer: the prefix, the new elements and the suffix go to their final
            // places (AALO: in place, unlogged); the old buffer is freed.
            size_type cap = grown(n + count);
            pointer old = data();
            auto* fresh =
                static_cast<pointer>(t.alloc(detail::checked_bytes(cap, sizeof(T), "vector")));
            if (at != 0)
                t.memcpy(fresh, old, at * sizeof(T));
            t.write(fresh + at, src, count * sizeof(T));
            if (at != n)
                t.memcpy(fresh + at + count, old + at, (n - at) * sizeof(T));
            data_ = fresh;
            capacity_ = cap;
            if (old)
                t.free(old);
        } else {
            pointer d = data();
            if (at != n) // overlapping: tx.memcpy reads everything before it writes
                t.memcpy(d + at + count, d + at, (n - at) * sizeof(T));
            t.write(d + at, src, count * sizeof(T));
        }
        size_ = n + count;
        return data() + at;
    }

    /// Replaces the contents with `count` elements from volatile memory.
    void assign_raw(tx& t, const T* src, size_type count) {
        if (count > max_size())
            throw std::length_error("tlptm::vector::assign: size exceeds max_size()");
        if (count > capacity()) {
            pointer old = data();
            size_type cap = std::max(count, std::max<size_type>(32 / sizeof(T), 1));
            auto* fresh =
                static_cast<pointer>(t.alloc(detail::checked_bytes(cap, sizeof(T), "vector")));
            t.write(fresh, src, count * sizeof(T));
            data_ = fresh;
            capacity_ = cap;
            if (old)
                t.free(old);
        } else if (count != 0) {
            t.write(data(), src, count * sizeof(T));
        }
        if (size() != count)
            size_ = count;
    }

    p<pointer> data_{nullptr};
    p<size_type> size_{0};
    p<size_type> capacity_{0};
};

/// Frees a vector made with tlptm::make: its buffer, then the object.
/// @throw tx_scope_error outside a transaction, or v is not an allocated block
template <class T> void destroy(vector<T>* v) {
    tx t = detail::mutating_tx("tlptm::destroy");
    if (v == nullptr)
        return;
    v->destroy();
    t.free(v);
}

/// Exchanges the contents of two vectors.
template <class T> void swap(vector<T>& a, vector<T>& b) {
    a.swap(b);
}

} // namespace tlptm
