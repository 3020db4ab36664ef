// tlptm — string: a persistent string of chars.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstring>
#include <functional>
#include <iterator>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <tlptm/alloc.hpp>
#include <tlptm/containers/cell.hpp>
#include <tlptm/containers/hash.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/p.hpp>
#include <tlptm/transaction.hpp>

namespace tlptm {

/// A string of chars in a tlptm pool, after std::string. It lives in the pool like any other
/// object (a field of the root, of an object made with tlptm::make, a key or value of a
/// tlptm::hash_map); a zero-filled string is empty. The header (pointer, size, capacity) is
/// made of p<> fields; the characters are a buffer of capacity() + 1 bytes that always ends
/// with a NUL at size().
///
/// Concurrency: every mutating member must be called inside a transaction and throws
/// tx_scope_error outside one; reads are allowed outside a transaction (no snapshot across
/// words, as p<T>). Reads that copy the characters out (str(), substr(), find(), compare(),
/// the comparison operators, std::hash) read them with one transactional read.
///
/// Growth allocates a new buffer in the running transaction and copies into it (AALO: in log
/// modes aalo and tlptm written in place and flushed, never logged), then frees the old one.
/// An append that fits in the capacity logs only the appended bytes.
///
/// Departures from std::string (docs/containers.md):
/// - `reference` is `cell<char>&` and the iterators `cell<char>*` (contiguous; value type
///   cell<char>): a redo log cannot expose a plain `char&`.
/// - c_str(), data() and the conversion to std::string_view point at the pool's bytes. Outside
///   a transaction they are O(1). Inside one they are O(n): they check that the bytes in place
///   are what the transaction sees, and throw tx_scope_error if the transaction has changed
///   the string with logged stores (whose bytes are in the pool only after commit); use
///   str() (a std::string copy) there.
/// - substr() and operator+ return std::string (a persistent result would need an
///   allocation in the pool; the caller assigns it where it wants it).
/// - No copy or move construction (a string is a pool object); copy assignment copies the
///   characters. No allocator, no char_traits parameter, no small-string optimisation.
/// - No destructor runs on pool objects: destroy() (or tlptm::destroy(string*)) frees the
///   buffer.
/// - pop_back() on an empty string throws std::out_of_range (the standard leaves it undefined).
/// - max_size() is 2^48 - 1.
class string {
public:
    using value_type = char;
    using traits_type = std::char_traits<char>;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using reference = cell<char>&;
    using const_reference = const cell<char>&;
    using pointer = cell<char>*;
    using const_pointer = const cell<char>*;
    using iterator = cell<char>*;
    using const_iterator = const cell<char>*;
    using reverse_iterator = std::reverse_iterator<iterator>;
    using const_reverse_iterator = std::reverse_iterator<const_iterator>;

    static constexpr size_type npos = static_cast<size_type>(-1);

    /// An empty string (all fields zero, as in a zero-filled root).
    string() = default;
    string(const string&) = delete;

    /// Copies the characters of o (which may be this string).
    /// @throw tx_scope_error outside a transaction
    /// @throw out_of_memory the pool has no room
    string& operator=(const string& o) { return assign(o); }
    string& operator=(std::string_view sv) { return assign(sv); }
    string& operator=(const char* s) { return assign(std::string_view(s)); }

    string& assign(const string& o) {
        if (&o == this) {
            detail::mutating_tx("tlptm::string::assign");
            return *this;
        }
        std::string copy = o.str();
        return assign(std::string_view(copy));
    }
    string& assign(std::string_view sv) {
        tx t = detail::mutating_tx("tlptm::string::assign");
        return replace_raw(t, 0, size(), sv.data(), sv.size());
    }
    string& assign(const char* s, size_type n) { return assign(std::string_view(s, n)); }
    string& assign(size_type count, char ch) { return assign(std::string(count, ch)); }

    // ---- element access -----------------------------------------------------------------

    /// Character i, bounds-checked.
    /// @throw std::out_of_range i >= size()
    reference at(size_type i) { return chars()[check(i, "at")]; }
    const_reference at(size_type i) const { return chars()[check(i, "at")]; }
    reference operator[](size_type i) { return chars()[i]; }
    const_reference operator[](size_type i) const { return chars()[i]; }
    reference front() { return chars()[0]; }
    const_reference front() const { return chars()[0]; }
    reference back() { return chars()[size() - 1]; }
    const_reference back() const { return chars()[size() - 1]; }

    /// The NUL-terminated characters in the pool (see the class comment: inside a transaction
    /// O(n), and an error if the transaction changed the string with logged stores).
    /// @throw tx_scope_error inside a transaction that changed the string (use str())
    const char* c_str() const { return in_place("c_str"); }
    const char* data() const { return in_place("data"); }
    /// A view of the characters in the pool (same rules as c_str()).
    std::string_view view() const { return {in_place("view"), size()}; }
    operator std::string_view() const { return view(); }

    /// A copy of the characters (one transactional read).
    std::string str() const {
        const char* d = data_.get();
        std::string out(size(), '\0');
        if (d)
            detail::load_bytes(out.data(), d, out.size());
        return out;
    }
    explicit operator std::string() const { return str(); }

    // ---- iterators ----------------------------------------------------------------------

    iterator begin() { return chars(); }
    const_iterator begin() const { return chars(); }
    const_iterator cbegin() const { return chars(); }
    iterator end() { return chars() + size(); }
    const_iterator end() const { return chars() + size(); }
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
    size_type length() const { return size(); }
    static constexpr size_type max_size() noexcept { return (size_type{1} << 48) - 1; }
    size_type capacity() const { return capacity_.get(); }

    /// Makes room for n characters.
    /// @throw std::length_error n > max_size()
    void reserve(size_type n) {
        tx t = detail::mutating_tx("tlptm::string::reserve");
        if (n > max_size())
            throw std::length_error("tlptm::string::reserve: n exceeds max_size()");
        if (n > capacity())
            reallocate(t, n);
    }

    /// Shrinks the buffer to size() characters (frees it if the string is empty).
    void shrink_to_fit() {
        tx t = detail::mutating_tx("tlptm::string::shrink_to_fit");
        size_type n = size();
        if (n == capacity())
            return;
        if (n == 0) {
            t.free(data_.get());
            data_ = nullptr;
            capacity_ = 0;
            return;
        }
        reallocate(t, n);
    }

    // ---- modifiers ----------------------------------------------------------------------

    /// Removes every character; the capacity stays.
    void clear() {
        tx t = detail::mutating_tx("tlptm::string::clear");
        if (size() != 0)
            replace_raw(t, 0, size(), nullptr, 0);
    }

    /// Frees the buffer and leaves the string empty with capacity 0: call it before freeing
    /// the object that holds the string.
    void destroy() {
        tx t = detail::mutating_tx("tlptm::string::destroy");
        if (char* d = data_.get()) {
            t.free(d);
            data_ = nullptr;
        }
        if (size() != 0)
            size_ = 0;
        if (capacity() != 0)
            capacity_ = 0;
    }

    string& insert(size_type pos, std::string_view sv) {
        tx t = detail::mutating_tx("tlptm::string::insert");
        return replace_raw(t, check_pos(pos, "insert"), 0, sv.data(), sv.size());
    }
    string& insert(size_type pos, const string& o) { return insert(pos, o.str()); }
    string& insert(size_type pos, size_type count, char ch) {
        return insert(pos, std::string(count, ch));
    }
    /// Inserts ch before pos; returns an iterator to it.
    iterator insert(const_iterator pos, char ch) {
        size_type at = static_cast<size_type>(pos - chars());
        insert(at, std::string_view(&ch, 1));
        return chars() + at;
    }

    /// Removes min(count, size() - pos) characters at pos.
    /// @throw std::out_of_range pos > size()
    string& erase(size_type pos = 0, size_type count = npos) {
        tx t = detail::mutating_tx("tlptm::string::erase");
        size_type n = size();
        check_pos(pos, "erase");
        return replace_raw(t, pos, std::min(count, n - pos), nullptr, 0);
    }
    iterator erase(const_iterator pos) {
        size_type at = static_cast<size_type>(pos - chars());
        erase(at, 1);
        return chars() + at;
    }
    iterator erase(const_iterator first, const_iterator last) {
        size_type at = static_cast<size_type>(first - chars());
        erase(at, static_cast<size_type>(last - first));
        return chars() + at;
    }

    void push_back(char ch) { append(std::string_view(&ch, 1)); }

    /// Removes the last character.
    /// @throw std::out_of_range the string is empty
    void pop_back() {
        tx t = detail::mutating_tx("tlptm::string::pop_back");
        size_type n = size();
        if (n == 0)
            throw std::out_of_range("tlptm::string::pop_back: the string is empty");
        replace_raw(t, n - 1, 1, nullptr, 0);
    }

    string& append(std::string_view sv) {
        tx t = detail::mutating_tx("tlptm::string::append");
        return replace_raw(t, size(), 0, sv.data(), sv.size());
    }
    string& append(const string& o) { return append(o.str()); }
    string& append(const char* s, size_type n) { return append(std::string_view(s, n)); }
    string& append(size_type count, char ch) { return append(std::string(count, ch)); }
    /// Appends o.substr(pos, count).
    string& append(const string& o, size_type pos, size_type count = npos) {
        return append(o.substr(pos, count));
    }

    string& operator+=(std::string_view sv) { return append(sv); }
    string& operator+=(const string& o) { return append(o); }
    string& operator+=(const char* s) { return append(std::string_view(s)); }
    string& operator+=(char ch) {
        push_back(ch);
        return *this;
    }

    /// Replaces min(count, size() - pos) characters at pos by sv.
    /// @throw std::out_of_range pos > size()
    string& replace(size_type pos, size_type count, std::string_view sv) {
        tx t = detail::mutating_tx("tlptm::string::replace");
        size_type n = size();
        check_pos(pos, "replace");
        return replace_raw(t, pos, std::min(count, n - pos), sv.data(), sv.size());
    }
    string& replace(size_type pos, size_type count, const string& o) {
        return replace(pos, count, o.str());
    }

    void resize(size_type n) { resize(n, '\0'); }
    /// Grows (with copies of ch) or shrinks to n characters.
    void resize(size_type n, char ch) {
        size_type have = size();
        if (n > have)
            append(n - have, ch);
        else
            erase(n);
    }

    /// Exchanges the contents of two strings (three header words each).
    void swap(string& o) {
        detail::mutating_tx("tlptm::string::swap");
        char* d = data_.get();
        size_type n = size_.get(), c = capacity_.get();
        data_ = o.data_.get();
        size_ = o.size_.get();
        capacity_ = o.capacity_.get();
        o.data_ = d;
        o.size_ = n;
        o.capacity_ = c;
    }

    /// Copies min(count, size() - pos) characters at pos to dest (no NUL); returns how many.
    /// @throw std::out_of_range pos > size()
    size_type copy(char* dest, size_type count, size_type pos = 0) const {
        size_type n = size();
        check_pos(pos, "copy");
        size_type k = std::min(count, n - pos);
        detail::load_bytes(dest, data_.get() + pos, k);
        return k;
    }

    // ---- search and comparison (on a copy of the characters) ----------------------------

    /// The substring [pos, pos + min(count, size() - pos)) as a std::string.
    /// @throw std::out_of_range pos > size()
    std::string substr(size_type pos = 0, size_type count = npos) const {
        size_type n = size();
        check_pos(pos, "substr");
        std::string out(std::min(count, n - pos), '\0');
        detail::load_bytes(out.data(), data_.get() + pos, out.size());
        return out;
    }

    size_type find(std::string_view sv, size_type pos = 0) const { return str().find(sv, pos); }
    size_type find(char ch, size_type pos = 0) const { return str().find(ch, pos); }
    size_type rfind(std::string_view sv, size_type pos = npos) const {
        return str().rfind(sv, pos);
    }
    size_type rfind(char ch, size_type pos = npos) const { return str().rfind(ch, pos); }
    size_type find_first_of(std::string_view sv, size_type pos = 0) const {
        return str().find_first_of(sv, pos);
    }
    size_type find_first_not_of(std::string_view sv, size_type pos = 0) const {
        return str().find_first_not_of(sv, pos);
    }
    size_type find_last_of(std::string_view sv, size_type pos = npos) const {
        return str().find_last_of(sv, pos);
    }
    size_type find_last_not_of(std::string_view sv, size_type pos = npos) const {
        return str().find_last_not_of(sv, pos);
    }
    bool starts_with(std::string_view sv) const {
        return size() >= sv.size() && substr(0, sv.size()) == sv;
    }
    bool starts_with(char ch) const { return !empty() && front() == ch; }
    bool ends_with(std::string_view sv) const {
        size_type n = size();
        return n >= sv.size() && substr(n - sv.size()) == sv;
    }
    bool ends_with(char ch) const { return !empty() && back() == ch; }
    bool contains(std::string_view sv) const { return find(sv) != npos; }
    bool contains(char ch) const { return find(ch) != npos; }

    int compare(std::string_view sv) const { return std::string_view(str()).compare(sv); }
    int compare(const string& o) const { return compare(o.str()); }
    int compare(size_type pos, size_type count, std::string_view sv) const {
        return std::string_view(substr(pos, count)).compare(sv);
    }

    /// True if the characters equal sv (size first, then one read of the characters).
    bool equals(std::string_view sv) const {
        size_type n = size();
        if (n != sv.size())
            return false;
        char buf[256];
        const char* d = data_.get();
        for (size_type done = 0; done < n;) {
            size_type k = std::min<size_type>(sizeof buf, n - done);
            detail::load_bytes(buf, d + done, k);
            if (std::memcmp(buf, sv.data() + done, k) != 0)
                return false;
            done += k;
        }
        return true;
    }

    friend bool operator==(const string& a, const string& b) { return a.equals(b.str()); }
    friend bool operator==(const string& a, std::string_view b) { return a.equals(b); }
    friend bool operator==(const string& a, const char* b) { return a.equals(b); }
    friend std::strong_ordering operator<=>(const string& a, const string& b) {
        return a.compare(b) <=> 0;
    }
    friend std::strong_ordering operator<=>(const string& a, std::string_view b) {
        return a.compare(b) <=> 0;
    }
    friend std::strong_ordering operator<=>(const string& a, const char* b) {
        return a.compare(b) <=> 0;
    }

    friend std::string operator+(const string& a, std::string_view b) {
        std::string r = a.str();
        r += b;
        return r;
    }
    friend std::string operator+(std::string_view a, const string& b) {
        std::string r(a);
        r += b.str();
        return r;
    }
    friend std::string operator+(const string& a, const string& b) { return a.str() + b.str(); }

    friend std::ostream& operator<<(std::ostream& os, const string& s) { return os << s.str(); }

private:
    cell<char>* chars() const { return reinterpret_cast<cell<char>*>(data_.get()); }

    size_type check(size_type i, const char* op) const {
        size_type n = size();
        if (i >= n)
            throw std::out_of_range(std::string("tlptm::string::") + op + ": index " +
                                    std::to_string(i) + " >= size " + std::to_string(n));
        return i;
    }
    size_type check_pos(size_type pos, const char* op) const {
        size_type n = size();
        if (pos > n)
            throw std::out_of_range(std::string("tlptm::string::") + op + ": position " +
                                    std::to_string(pos) + " > size " + std::to_string(n));
        return pos;
    }

    /// The characters in place, after checking (inside a transaction) that they are what the
    /// transaction sees.
    const char* in_place(const char* op) const {
        const char* d = data_.get();
        if (d == nullptr)
            return "";
        if (detail::in_transaction()) {
            size_type n = size();
            std::string seen(n + 1, '\0');
            detail::load_bytes(seen.data(), d, n + 1);
            // The pool's bytes may be rewritten only by a commit, which the transactional
            // read above would have seen (and the transaction will fail validation).
            if (std::memcmp(seen.data(), d, n + 1) != 0)
                throw tx_scope_error(std::string("tlptm::string::") + op +
                                     ": the running transaction changed the string with logged "
                                     "stores, so its bytes are not in the pool before commit; "
                                     "use str()");
        }
        return d;
    }

    /// The capacity after growing to hold `need` characters: doubling, and a buffer (capacity
    /// + 1 for the NUL) that fills its 16-byte size class.
    size_type grown(size_type need) const {
        if (need > max_size())
            throw std::length_error("tlptm::string: size exceeds max_size()");
        size_type c = std::max(need, capacity() * 2);
        c = ((c + 1 + 15) & ~size_type{15}) - 1;
        return std::min(c, max_size());
    }

    /// Moves the characters to a new buffer of cap + 1 bytes; the allocation comes first.
    void reallocate(tx& t, size_type cap) {
        char* old = data_.get();
        size_type n = size();
        auto* fresh = static_cast<char*>(t.alloc(cap + 1));
        if (n != 0) // AALO: written in place, not logged
            t.memcpy(fresh, old, n);
        t.write(fresh + n, "", 1);
        data_ = fresh;
        capacity_ = cap;
        if (old)
            t.free(old);
    }

    /// Replaces `erase` characters at pos by `count` characters from src (volatile memory or
    /// this string's own bytes), keeping the NUL at the end.
    string& replace_raw(tx& t, size_type pos, size_type erase, const char* src, size_type count) {
        size_type n = size();
        if (count > max_size() - (n - erase))
            throw std::length_error("tlptm::string: size exceeds max_size()");
        size_type m = n - erase + count;
        char* d = data_.get();
        std::string own;
        if (d != nullptr && src >= d && src < d + capacity() + 1) { // aliases our buffer
            own.assign(count, '\0');
            detail::load_bytes(own.data(), src, count);
            src = own.data();
        }
        if (m > capacity()) {
            size_type cap = grown(m);
            auto* fresh = static_cast<char*>(t.alloc(cap + 1));
            // AALO: every store below goes to the new buffer: in place, not logged.
            if (pos != 0)
                t.memcpy(fresh, d, pos);
            if (count != 0)
                t.write(fresh + pos, src, count);
            if (pos + erase != n)
                t.memcpy(fresh + pos + count, d + pos + erase, n - pos - erase);
            t.write(fresh + m, "", 1);
            data_ = fresh;
            capacity_ = cap;
            if (d)
                t.free(d);
        } else if (d != nullptr) {
            if (erase != count && pos + erase != n) // tx.memcpy behaves like memmove
                t.memcpy(d + pos + count, d + pos + erase, n - pos - erase);
            if (count != 0)
                t.write(d + pos, src, count);
            t.write(d + m, "", 1);
        }
        if (m != n)
            size_ = m;
        return *this;
    }

    p<char*> data_{nullptr};
    p<size_type> size_{0};
    p<size_type> capacity_{0};
};

/// Frees a string made with tlptm::make: its buffer, then the object.
/// @throw tx_scope_error outside a transaction, or s is not an allocated block
inline void destroy(string* s) {
    tx t = detail::mutating_tx("tlptm::destroy");
    if (s == nullptr)
        return;
    s->destroy();
    t.free(s);
}

inline void swap(string& a, string& b) {
    a.swap(b);
}

/// The stable hash of a string's characters: equal to hash<std::string_view> of the same
/// characters, so a hash_map<string, V> can be searched with a std::string_view.
template <> struct hash<string> : hash<std::string_view> {
    using hash<std::string_view>::operator();
    std::uint64_t operator()(const string& s) const { return (*this)(std::string_view(s.str())); }
};

} // namespace tlptm

/// std::hash of a tlptm::string: the std::hash of the same characters as a std::string_view.
template <> struct std::hash<tlptm::string> {
    std::size_t operator()(const tlptm::string& s) const {
        return std::hash<std::string_view>{}(s.str());
    }
};
