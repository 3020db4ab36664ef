#include <tlptm/tlptm.hpp>

int main() {
    static_assert(sizeof(tlptm::p<int>) == sizeof(int));
    return 0;
}
