// Whether this test binary is built with AddressSanitizer (`make test SANITIZE=1`, build-asan),
// where code runs 10-30x slower. Brute-force cross-checks and size limits take a smaller
// instance there: the same code paths run under the sanitizers, and the plain build runs the
// full instance (the CI runs both).
#pragma once

namespace memplan::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;  // gcc
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;  // clang
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// `full` in the plain build, `sanitized` under AddressSanitizer.
template <class T>
constexpr T UnlessSanitized(T full, T sanitized) {
  return kSanitized ? sanitized : full;
}

}  // namespace memplan::testing
