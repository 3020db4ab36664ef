// tlptm — append_vector: a growable array of trivially copyable elements whose append is
// always inlined.
//
// The transaction path appends to a few arrays (the read-set, the write-set, the orecs
// locked, the lines written back) several times per transaction. std::vector's append is
// often left out of line by the compiler, and every call saves registers on the stack: stores
// that, after a commit's fence, wait in the store buffer until the fence completes, and so
// keep the next transaction from overlapping the persist. Here the append is a compare, a
// store and an increment; growing is out of line. Only what the library uses is provided.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace tlptm::detail {

template <class T> class append_vector {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                  "append_vector holds trivially copyable elements only");

public:
    using value_type = T;
    using iterator = T*;
    using const_iterator = const T*;

    append_vector() = default;
    append_vector(const append_vector& o) { *this = o; }
    append_vector& operator=(const append_vector& o) {
        if (this != &o) {
            clear();
            reserve(o.size());
            if (o.size() != 0)
                std::memcpy(static_cast<void*>(begin_), o.begin_, o.size() * sizeof(T));
            end_ = begin_ + o.size();
        }
        return *this;
    }
    append_vector(append_vector&& o) noexcept
        : begin_(std::exchange(o.begin_, nullptr)), end_(std::exchange(o.end_, nullptr)),
          cap_(std::exchange(o.cap_, nullptr)) {}
    append_vector& operator=(append_vector&& o) noexcept {
        if (this != &o) {
            std::free(begin_);
            begin_ = std::exchange(o.begin_, nullptr);
            end_ = std::exchange(o.end_, nullptr);
            cap_ = std::exchange(o.cap_, nullptr);
        }
        return *this;
    }
    ~append_vector() { std::free(begin_); }

    [[gnu::always_inline]] void push_back(const T& v) {
        if (end_ == cap_) [[unlikely]]
            grow(size() + 1);
        *end_++ = v;
    }
    template <class... A> [[gnu::always_inline]] T& emplace_back(A&&... a) {
        if (end_ == cap_) [[unlikely]]
            grow(size() + 1);
        *end_ = T{std::forward<A>(a)...};
        return *end_++;
    }

    std::size_t size() const noexcept { return static_cast<std::size_t>(end_ - begin_); }
    std::size_t capacity() const noexcept { return static_cast<std::size_t>(cap_ - begin_); }
    bool empty() const noexcept { return end_ == begin_; }
    void clear() noexcept { end_ = begin_; }
    void reserve(std::size_t n) {
        if (n > capacity())
            grow(n);
    }
    /// Appends n elements left unwritten and returns the first (the caller writes them all).
    T* append(std::size_t n) {
        if (static_cast<std::size_t>(cap_ - end_) < n)
            grow(size() + n);
        T* first = end_;
        end_ += n;
        return first;
    }

    T* data() noexcept { return begin_; }
    const T* data() const noexcept { return begin_; }
    T* begin() noexcept { return begin_; }
    T* end() noexcept { return end_; }
    const T* begin() const noexcept { return begin_; }
    const T* end() const noexcept { return end_; }
    T& back() noexcept { return end_[-1]; }
    const T& back() const noexcept { return end_[-1]; }
    T& operator[](std::size_t i) noexcept { return begin_[i]; }
    const T& operator[](std::size_t i) const noexcept { return begin_[i]; }

    /// Removes [first, last) (what std::unique and std::remove_if leave at the end).
    void erase(T* first, T* last) noexcept {
        std::memmove(static_cast<void*>(first), last,
                     static_cast<std::size_t>(end_ - last) * sizeof(T));
        end_ -= last - first;
    }

private:
    [[gnu::noinline]] void grow(std::size_t need) {
        const std::size_t n = size();
        const std::size_t cap = std::max<std::size_t>({need, 2 * capacity(), 16});
        void* p = std::realloc(begin_, cap * sizeof(T)); // T is trivially copyable
        if (p == nullptr)
            throw std::bad_alloc();
        begin_ = static_cast<T*>(p);
        end_ = begin_ + n;
        cap_ = begin_ + cap;
    }

    T* begin_ = nullptr;
    T* end_ = nullptr;
    T* cap_ = nullptr;
};

} // namespace tlptm::detail
