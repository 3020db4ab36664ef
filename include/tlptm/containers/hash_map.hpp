// tlptm — hash_map<K, V>: a persistent chained hash table with incremental rehashing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <tlptm/alloc.hpp>
#include <tlptm/containers/cell.hpp>
#include <tlptm/containers/hash.hpp>
#include <tlptm/containers/string.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/p.hpp>
#include <tlptm/transaction.hpp>

namespace tlptm {

namespace detail {

/// How a key or value of type T is kept in a node: a tlptm::string as itself, anything else
/// (trivially copyable) as a cell<T>.
template <class T>
using map_stored_t = std::conditional_t<std::is_same_v<T, string>, string, cell<T>>;

/// How a key or value of type T is passed in: a tlptm::string as a std::string_view.
template <class T>
using map_arg_t = std::conditional_t<std::is_same_v<T, string>, std::string_view, T>;

template <class T>
concept map_element = std::is_same_v<T, string> || std::is_trivially_copyable_v<T>;

/// Stripes of a hash_map's element count: each thread counts in its own stripe (alone in its
/// cache line and orec granule; see this_thread_map_stripe for the orecs' lines), so inserts of
/// different threads into different buckets do not conflict on the count.
inline constexpr std::size_t map_stripes = 8;

struct map_size_stripe {
    p<std::int64_t> n{0};
    unsigned char pad_[56] = {};
};
static_assert(sizeof(map_size_stripe) == 64);

/// The calling thread's stripe. The stripes are 64 bytes (the persistent layout), so four
/// share a span of orecs (false_sharing_span): threads take them in the order 0, 4, 1, 5, ...
/// so that the first two threads count in different spans (their inserts would otherwise lock
/// orecs in the same cache line), the first four in different stripes of the two spans.
inline std::size_t this_thread_map_stripe() noexcept {
    constexpr std::size_t per_span = false_sharing_span / sizeof(map_size_stripe);
    constexpr std::size_t spans = map_stripes / per_span;
    static_assert(per_span >= 1 && spans >= 1 && map_stripes % per_span == 0);
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t mine = [] {
        const std::size_t k = next.fetch_add(1, std::memory_order_relaxed);
        return (k % spans) * per_span + (k / spans) % per_span;
    }();
    return mine;
}

} // namespace detail

/// What an iterator of hash_map<K, V> designates: the key (`first`, read-only) and the value
/// (`second`: a cell<V>, or a tlptm::string), as std::pair<const K, V> in std::unordered_map.
/// `auto& [k, v] = *it` binds them.
template <class K, class V> struct hash_map_entry {
    const detail::map_stored_t<K> first;
    detail::map_stored_t<V> second;
};

/// A chained hash table in a tlptm pool, after std::unordered_map, generalised from the
/// workload table of examples/hashtable. Keys and values are trivially copyable types or
/// tlptm::string. It lives in the pool like any other object (a field of the root or of an
/// object made with tlptm::make); a zero-filled hash_map is empty (its first insert allocates
/// 16 buckets).
///
/// Rehashing is incremental: when an insert finds the load factor above max_load_factor(), it
/// allocates a table of twice the buckets (not zeroed: a new bucket is written when the old
/// bucket it comes from moves), and every insert from then on moves the next two old buckets
/// (their nodes are relinked, never copied) before it does its own work. No transaction
/// grows with the table. Lookups look in the new table for buckets that have moved and in
/// the old one for the rest. Erasures never move buckets.
///
/// Concurrency: every operation runs inside the caller's transaction; mutating members throw
/// tx_scope_error outside one. Reads are allowed outside a transaction (no snapshot, as for
/// p<T>). Any number of threads may use one map inside their transactions: inserts of
/// different keys conflict only when they hit the same bucket (the count is striped per
/// thread), except while a rehash is under way (every insert then advances the shared
/// migration cursor) and on the load-factor check (every 8th insert of a thread reads every
/// stripe).
///
/// Departures from std::unordered_map (docs/containers.md):
/// - value_type is hash_map_entry<K, V> (`first` and `second`), not std::pair<const K, V>;
///   `second` is a cell<V> (assign to it: a transactional store) or a tlptm::string.
/// - Keys and values are passed by value (or as std::string_view for tlptm::string): insert /
///   emplace / try_emplace take (key, value), insert_or_assign and operator[] as in std.
/// - The default hash is tlptm::hash<K>, stable across runs (it is kept in the pool); a custom
///   Hash must be too. KeyEqual compares map_arg_t<K> values.
/// - Iterators are forward iterators invalidated by every insertion (any insertion may move
///   buckets), not only by a rehash; pointers and references to elements stay valid until
///   their element is erased. Erasure invalidates only iterators to the erased element, so
///   `it = m.erase(it)` loops work. begin() walks the buckets (O(bucket_count)).
/// - No rehash(), reserve(), bucket interface, node handles, merge, allocator, or copy/move
///   construction. clear() frees the tables too (bucket_count() becomes 0), in one
///   transaction that grows with the table, as destroy() does.
/// - A mutating call on a map of another pool than the running transaction's throws
///   tx_scope_error (from its first store; the transaction aborts, so nothing is kept).
template <class K, class V, class Hash = tlptm::hash<K>,
          class KeyEqual = std::equal_to<detail::map_arg_t<K>>>
class hash_map {
    static_assert(detail::map_element<K>,
                  "tlptm::hash_map<K, V>: K must be trivially copyable or tlptm::string");
    static_assert(detail::map_element<V>,
                  "tlptm::hash_map<K, V>: V must be trivially copyable or tlptm::string");

    static constexpr bool string_key = std::is_same_v<K, string>;
    static constexpr bool string_value = std::is_same_v<V, string>;

public:
    using key_type = K;
    using mapped_type = V;
    using value_type = hash_map_entry<K, V>;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using hasher = Hash;
    using key_equal = KeyEqual;
    using reference = value_type&;
    using const_reference = const value_type&;
    /// How keys are passed in (K, or std::string_view for tlptm::string).
    using key_arg = detail::map_arg_t<K>;
    /// How values are passed in (V, or std::string_view for tlptm::string).
    using mapped_arg = detail::map_arg_t<V>;
    /// What `second` is: cell<V>, or tlptm::string.
    using mapped_reference = detail::map_stored_t<V>&;

    /// Buckets of a new table; growth doubles them.
    static constexpr size_type initial_buckets = 16;
    /// Old buckets an insert moves while a rehash is under way.
    static constexpr size_type buckets_moved_per_insert = 2;
    /// A thread checks the load factor every this many inserts of its own.
    static constexpr std::int64_t load_check_interval = 8;

private:
    struct node {
        value_type entry;
        p<node*> next;
        p<std::uint64_t> hash;
    };
    using bucket = p<node*>;

    template <bool Const> class basic_iterator {
    public:
        using iterator_category = std::forward_iterator_tag;
        using iterator_concept = std::forward_iterator_tag;
        using value_type = hash_map_entry<K, V>;
        using difference_type = std::ptrdiff_t;
        using reference = std::conditional_t<Const, const value_type&, value_type&>;
        using pointer = std::conditional_t<Const, const value_type*, value_type*>;

        basic_iterator() = default;
        /// iterator -> const_iterator.
        template <bool C = Const>
        requires C basic_iterator(const basic_iterator<false>& o)
            : map_(o.map_), node_(o.node_), pos_(o.pos_) {}

        reference operator*() const { return node_->entry; }
        pointer operator->() const { return &node_->entry; }
        basic_iterator& operator++() {
            node_ = node_->next.get();
            if (node_ == nullptr)
                map_->skip_empty(node_, pos_);
            return *this;
        }
        basic_iterator operator++(int) {
            basic_iterator r = *this;
            ++*this;
            return r;
        }
        friend bool operator==(const basic_iterator& a, const basic_iterator& b) noexcept {
            return a.node_ == b.node_;
        }

    private:
        friend class hash_map;
        template <bool> friend class basic_iterator;
        basic_iterator(const hash_map* m, node* n, size_type pos) : map_(m), node_(n), pos_(pos) {}

        const hash_map* map_ = nullptr;
        node* node_ = nullptr;
        size_type pos_ = 0; ///< virtual bucket position (see bucket_at)
    };

public:
    using iterator = basic_iterator<false>;
    using const_iterator = basic_iterator<true>;

    /// An empty map (all fields zero, as in a zero-filled root).
    hash_map() = default;
    hash_map(const hash_map&) = delete;
    hash_map& operator=(const hash_map&) = delete;

    // ---- iterators ----------------------------------------------------------------------

    iterator begin() { return first_from(0); }
    const_iterator begin() const { return first_from(0); }
    const_iterator cbegin() const { return begin(); }
    iterator end() noexcept { return iterator(this, nullptr, 0); }
    const_iterator end() const noexcept { return const_iterator(this, nullptr, 0); }
    const_iterator cend() const noexcept { return end(); }

    // ---- capacity -----------------------------------------------------------------------

    bool empty() const { return size() == 0; }
    /// The number of elements: the sum of the per-thread stripes (reads every stripe).
    size_type size() const {
        std::int64_t total = 0;
        for (const auto& s : stripes_)
            total += s.n.get();
        return static_cast<size_type>(total);
    }
    static constexpr size_type max_size() noexcept { return size_type{1} << 48; }

    // ---- lookup -------------------------------------------------------------------------

    iterator find(const key_arg& k) { return lookup(k); }
    const_iterator find(const key_arg& k) const { return lookup(k); }
    bool contains(const key_arg& k) const { return lookup(k).node_ != nullptr; }
    size_type count(const key_arg& k) const { return contains(k) ? 1 : 0; }

    /// The value of k.
    /// @throw std::out_of_range k is absent
    mapped_reference at(const key_arg& k) {
        iterator it = lookup(k);
        if (it.node_ == nullptr)
            throw std::out_of_range("tlptm::hash_map::at: no such key");
        return it.node_->entry.second;
    }
    const detail::map_stored_t<V>& at(const key_arg& k) const {
        return const_cast<hash_map*>(this)->at(k);
    }

    // ---- modifiers ----------------------------------------------------------------------

    /// Inserts (k, v) unless k is present; returns the element of k and whether it was
    /// inserted.
    /// @throw tx_scope_error outside a transaction
    /// @throw out_of_memory no room for the node (or a string's characters)
    std::pair<iterator, bool> insert(const key_arg& k, const mapped_arg& v) {
        tx t = detail::mutating_tx("tlptm::hash_map::insert");
        return put(t, k, v, false);
    }
    std::pair<iterator, bool> insert(const std::pair<key_arg, mapped_arg>& kv) {
        return insert(kv.first, kv.second);
    }
    std::pair<iterator, bool> emplace(const key_arg& k, const mapped_arg& v) {
        return insert(k, v);
    }
    std::pair<iterator, bool> try_emplace(const key_arg& k, const mapped_arg& v) {
        return insert(k, v);
    }

    /// Inserts (k, v), or assigns v to the value of k if present.
    std::pair<iterator, bool> insert_or_assign(const key_arg& k, const mapped_arg& v) {
        tx t = detail::mutating_tx("tlptm::hash_map::insert_or_assign");
        return put(t, k, v, true);
    }

    /// The value of k, inserted value-initialised (or empty) if absent.
    mapped_reference operator[](const key_arg& k) {
        tx t = detail::mutating_tx("tlptm::hash_map::operator[]");
        iterator it = lookup(k);
        if (it.node_ == nullptr)
            it = put(t, k, mapped_arg{}, false).first;
        return it.node_->entry.second;
    }

    /// Removes k; returns 1 if it was present, else 0.
    size_type erase(const key_arg& k) {
        tx t = detail::mutating_tx("tlptm::hash_map::erase");
        const std::uint64_t h = hash_of(k);
        bucket* b = locate(h).first;
        if (b == nullptr)
            return 0;
        for (bucket* link = b; node* n = link->get(); link = &n->next) {
            if (matches(n, h, k)) {
                unlink(t, link, n);
                return 1;
            }
        }
        return 0;
    }

    /// Removes the element at pos; returns the iterator that follows it.
    iterator erase(const_iterator pos) {
        tx t = detail::mutating_tx("tlptm::hash_map::erase");
        node* victim = pos.node_;
        if (victim == nullptr)
            throw std::out_of_range("tlptm::hash_map::erase: end() is not an element");
        iterator next(this, victim, pos.pos_);
        ++next;
        for (bucket* link = locate(victim->hash.get()).first; node* n = link->get();
             link = &n->next) {
            if (n == victim) {
                unlink(t, link, n);
                return next;
            }
        }
        throw std::out_of_range("tlptm::hash_map::erase: the iterator is not of this map");
    }

    /// Frees every node, string and table; the map is then empty with no buckets. One
    /// transaction for the whole table: its log grows with the number of elements.
    void clear() { destroy(); }

    /// Frees everything the map owns and leaves it empty (call it before freeing the object
    /// that holds the map).
    void destroy() {
        tx t = detail::mutating_tx("tlptm::hash_map::destroy");
        bucket* tb = table_.get();
        if (tb == nullptr)
            return;
        size_type n = bucket_count_.get();
        shape s = read_shape();
        for (size_type pos = 0; pos < 2 * n; ++pos) {
            bucket* b = bucket_at(s, pos);
            for (node* x = b ? b->get() : nullptr; x != nullptr;) {
                node* nx = x->next.get();
                free_node(t, x);
                x = nx;
            }
        }
        if (bucket* nb = next_table_.get()) {
            t.free(nb);
            next_table_ = nullptr;
        }
        t.free(tb);
        table_ = nullptr;
        bucket_count_ = 0;
        if (migrated_.get() != 0)
            migrated_ = 0;
        for (auto& s : stripes_)
            if (s.n.get() != 0)
                s.n = 0;
    }

    /// Exchanges the contents of two maps of the same pool.
    void swap(hash_map& o) {
        detail::mutating_tx("tlptm::hash_map::swap");
        swap_field(table_, o.table_);
        swap_field(bucket_count_, o.bucket_count_);
        swap_field(next_table_, o.next_table_);
        swap_field(migrated_, o.migrated_);
        swap_field(max_load_, o.max_load_);
        for (std::size_t i = 0; i < detail::map_stripes; ++i)
            swap_field(stripes_[i].n, o.stripes_[i].n);
    }

    // ---- hash policy --------------------------------------------------------------------

    /// Buckets of the table (of the new table while a rehash is under way).
    size_type bucket_count() const {
        size_type n = bucket_count_.get();
        return next_table_.get() != nullptr ? 2 * n : n;
    }
    float load_factor() const {
        size_type b = bucket_count();
        return b == 0 ? 0.0f : static_cast<float>(size()) / static_cast<float>(b);
    }
    /// The load factor above which an insert starts a rehash (1.0 unless set).
    float max_load_factor() const {
        float f = max_load_.get();
        return f > 0.0f ? f : 1.0f;
    }
    /// @throw std::invalid_argument ml is not positive
    void max_load_factor(float ml) {
        detail::mutating_tx("tlptm::hash_map::max_load_factor");
        if (!(ml > 0.0f))
            throw std::invalid_argument("tlptm::hash_map::max_load_factor: must be positive");
        max_load_ = ml;
    }
    /// True while a rehash is under way (old buckets are still to be moved).
    bool rehashing() const { return next_table_.get() != nullptr; }

    hasher hash_function() const { return hasher{}; }
    key_equal key_eq() const { return key_equal{}; }

private:
    template <bool> friend class basic_iterator;

    std::uint64_t hash_of(const key_arg& k) const { return static_cast<std::uint64_t>(Hash{}(k)); }

    /// True if node n (of hash h) holds key k. String keys compare the kept hash first (a
    /// word) before their characters; other keys compare directly (one read).
    bool matches(const node* n, std::uint64_t h, const key_arg& k) const {
        if constexpr (string_key)
            return n->hash.get() == h && n->entry.first.equals(k);
        else
            return KeyEqual{}(n->entry.first.get(), k);
    }

    /// The four words that say where the buckets are, read together.
    struct shape {
        bucket* table;
        size_type count;
        bucket* next;
        size_type migrated;
    };
    shape read_shape() const {
        static_assert(offsetof(hash_map, bucket_count_) == offsetof(hash_map, table_) + 8 &&
                          offsetof(hash_map, next_table_) == offsetof(hash_map, table_) + 16 &&
                          offsetof(hash_map, migrated_) == offsetof(hash_map, table_) + 24,
                      "the shape fields are adjacent words");
        shape s;
        detail::load_bytes(&s, &table_, sizeof s);
        return s;
    }

    /// The bucket at virtual position pos in [0, 2 * count): position 2i (and 2i + 1) is old
    /// bucket i, or, once it has moved, the new buckets i (and i + count) its nodes went to.
    static bucket* bucket_at(const shape& s, size_type pos) {
        size_type i = pos / 2, half = pos % 2;
        if (s.next != nullptr && i < s.migrated)
            return s.next + i + half * s.count;
        return half == 0 ? s.table + i : nullptr;
    }

    /// The bucket of hash h and its virtual position (nullptr if there is no table).
    static std::pair<bucket*, size_type> locate(const shape& s, std::uint64_t h) {
        if (s.table == nullptr)
            return {nullptr, 0};
        size_type i = h & (s.count - 1);
        if (s.next != nullptr && i < s.migrated) {
            size_type j = h & (2 * s.count - 1);
            return {s.next + j, 2 * i + (j >= s.count ? 1 : 0)};
        }
        return {s.table + i, 2 * i};
    }
    std::pair<bucket*, size_type> locate(std::uint64_t h) const { return locate(read_shape(), h); }

    iterator lookup(const key_arg& k) const {
        const std::uint64_t h = hash_of(k);
        auto [b, pos] = locate(h);
        if (b != nullptr)
            for (node* n = b->get(); n != nullptr; n = n->next.get())
                if (matches(n, h, k))
                    return iterator(this, n, pos);
        return iterator(this, nullptr, 0);
    }

    /// Moves `node_` / `pos` on to the first node at a position after pos (or to end()).
    void skip_empty(node*& n, size_type& pos) const {
        shape s = read_shape();
        size_type limit = 2 * s.count;
        while (n == nullptr && ++pos < limit)
            if (bucket* b = bucket_at(s, pos))
                n = b->get();
        if (n == nullptr)
            pos = 0;
    }

    iterator first_from(size_type pos) const {
        shape s = read_shape();
        if (s.table == nullptr)
            return iterator(this, nullptr, 0);
        bucket* b = bucket_at(s, pos);
        node* n = b ? b->get() : nullptr;
        if (n == nullptr)
            skip_empty(n, pos);
        return iterator(this, n, pos);
    }

    /// insert / insert_or_assign.
    std::pair<iterator, bool> put(tx& t, const key_arg& k, const mapped_arg& v, bool assign) {
        const std::uint64_t h = hash_of(k);
        shape s = read_shape();
        if (s.table == nullptr)
            make_table(t, s);
        for (size_type m = 0; m < buckets_moved_per_insert && s.next != nullptr; ++m)
            move_bucket(t, s);
        auto [b, pos] = locate(s, h);
        for (node* n = b->get(); n != nullptr; n = n->next.get()) {
            if (matches(n, h, k)) {
                if (assign)
                    n->entry.second = v;
                return {iterator(this, n, pos), false};
            }
        }
        node* n = make_node(t, h, k, v, b->get());
        *b = n; // logged: with the count, the only store of an insert into an old table
        auto& stripe = stripes_[detail::this_thread_map_stripe()].n;
        std::int64_t c = stripe.get() + 1;
        stripe = c;
        if (c % load_check_interval == 0 && s.next == nullptr)
            maybe_grow(t, s);
        return {iterator(this, n, pos), true};
    }

    /// A node with key k and value v in front of `next`. AALO: the node is allocated by this
    /// transaction, so its bytes (and its strings' characters) are written in place.
    node* make_node(tx& t, std::uint64_t h, const key_arg& k, const mapped_arg& v, node* next) {
        auto* n = static_cast<node*>(t.alloc(sizeof(node)));
        alignas(node) unsigned char image[sizeof(node)] = {};
        auto* img = reinterpret_cast<node*>(image);
        if constexpr (!string_key)
            std::memcpy(static_cast<void*>(const_cast<detail::map_stored_t<K>*>(&img->entry.first)),
                        &k, sizeof(K));
        if constexpr (!string_value)
            std::memcpy(static_cast<void*>(&img->entry.second), &v, sizeof(V));
        std::memcpy(static_cast<void*>(&img->next), &next, sizeof next);
        std::memcpy(static_cast<void*>(&img->hash), &h, sizeof h);
        t.write(n, image, sizeof(node));
        if constexpr (string_key)
            const_cast<string&>(n->entry.first).assign(k);
        if constexpr (string_value)
            n->entry.second.assign(v);
        return n;
    }

    void free_node(tx& t, node* n) {
        if constexpr (string_key)
            const_cast<string&>(n->entry.first).destroy();
        if constexpr (string_value)
            n->entry.second.destroy();
        t.free(n);
    }

    void unlink(tx& t, bucket* link, node* n) {
        *link = n->next.get();
        auto& stripe = stripes_[detail::this_thread_map_stripe()].n;
        stripe = stripe.get() - 1;
        free_node(t, n);
    }

    /// The first table: initial_buckets empty buckets (AALO: zeroed in place).
    void make_table(tx& t, shape& s) {
        auto* tb = static_cast<bucket*>(t.alloc(initial_buckets * sizeof(bucket)));
        static const bucket zeros[initial_buckets] = {};
        t.write(tb, zeros, sizeof zeros);
        table_ = tb;
        bucket_count_ = initial_buckets;
        s.table = tb;
        s.count = initial_buckets;
    }

    /// Starts a rehash if the load factor is above the maximum. If the pool has no room for
    /// the new table, the map keeps its buckets (the insert that asked still succeeds).
    void maybe_grow(tx& t, const shape& s) {
        size_type n = s.count;
        if (static_cast<float>(size()) <= max_load_factor() * static_cast<float>(n))
            return;
        if (2 * n > max_size())
            return;
        bucket* nb;
        try {
            // Not zeroed: new bucket j is written when old bucket j mod n moves.
            nb = static_cast<bucket*>(t.alloc(2 * n * sizeof(bucket)));
        } catch (const out_of_memory&) {
            return;
        }
        next_table_ = nb;
        if (s.migrated != 0)
            migrated_ = 0;
    }

    /// Moves the next old bucket into the new table (splitting its chain by hash bit n,
    /// keeping the order, storing only the links that change); the last one retires the old
    /// table.
    void move_bucket(tx& t, shape& s) {
        bucket* tb = s.table;
        bucket* nb = s.next;
        size_type n = s.count;
        size_type i = s.migrated;
        node* head[2] = {nullptr, nullptr};
        node* tail[2] = {nullptr, nullptr};
        node* tail_next[2] = {nullptr, nullptr}; // what tail[side]->next holds now
        for (node* x = tb[i].get(); x != nullptr;) {
            node* nx = x->next.get();
            int side = (x->hash.get() & n) != 0 ? 1 : 0;
            if (tail[side] == nullptr)
                head[side] = x;
            else if (tail_next[side] != x)
                tail[side]->next = x;
            tail[side] = x;
            tail_next[side] = nx;
            x = nx;
        }
        for (int side = 0; side < 2; ++side)
            if (tail[side] != nullptr && tail_next[side] != nullptr)
                tail[side]->next = nullptr;
        nb[i] = head[0];
        nb[i + n] = head[1];
        if (i + 1 < n) {
            migrated_ = i + 1;
            s.migrated = i + 1;
            return;
        }
        table_ = nb;
        bucket_count_ = 2 * n;
        next_table_ = nullptr;
        migrated_ = 0;
        s = shape{nb, 2 * n, nullptr, 0};
        t.free(tb);
    }

    template <class F> static void swap_field(F& a, F& b) {
        auto x = a.get();
        a = b.get();
        b = x;
    }

    p<bucket*> table_{nullptr};       ///< the table (the old one while a rehash is under way)
    p<size_type> bucket_count_{0};    ///< buckets of table_ (a power of two)
    p<bucket*> next_table_{nullptr};  ///< the table of 2 * bucket_count_ buckets being filled
    p<size_type> migrated_{0};        ///< old buckets [0, migrated_) have moved
    p<float> max_load_{0.0f};         ///< 0: the default, 1.0
    unsigned char pad_[64 - 36] = {}; ///< the stripes start a cache line after the header
    detail::map_size_stripe stripes_[detail::map_stripes];
};

/// Frees a hash_map made with tlptm::make: its nodes, strings and tables, then the object.
template <class K, class V, class H, class E> void destroy(hash_map<K, V, H, E>* m) {
    tx t = detail::mutating_tx("tlptm::destroy");
    if (m == nullptr)
        return;
    m->destroy();
    t.free(m);
}

} // namespace tlptm
