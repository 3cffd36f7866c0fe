// The one list of components: `tandem verify` runs their rows in this order, `tandem golden`
// regenerates and checks their cases, and manifests name them. Add a component: its stem files,
// one row here, one tandem_component() call in CMakeLists.txt (this file does not compile while
// the two name different stems).
#include <algorithm>
#include <string_view>

#include "cases/case.hpp"
#include "tandem_components.hpp"  // TANDEM_CMAKE_COMPONENTS, generated from CMakeLists.txt

#define TANDEM_COMPONENTS(X) \
  X(residual)                \
  X(engram)                  \
  X(vision)                  \
  X(attention)               \
  X(moe)                     \
  X(dspark)                  \
  X(model)                   \
  X(dense)                   \
  X(kvcache)                 \
  X(indexer)                 \
  X(sparse_attn)

namespace tandem {
namespace {

// Every stem of each list is in the other.
#define TANDEM_STEM_NAME(stem) std::string_view(#stem),
constexpr std::string_view kRegistered[] = {TANDEM_COMPONENTS(TANDEM_STEM_NAME)};
constexpr std::string_view kBuilt[] = {TANDEM_CMAKE_COMPONENTS(TANDEM_STEM_NAME)};
template <size_t N>
constexpr bool lists(const std::string_view (&list)[N], std::string_view stem) {
  return std::find(list, list + N, stem) != list + N;
}
#define TANDEM_CHECK_BUILT(stem)                                                           \
  static_assert(lists(kBuilt, #stem),                                                      \
                "cases/registry.cpp lists " #stem ", which has no tandem_component(" #stem \
                ") in CMakeLists.txt");
TANDEM_COMPONENTS(TANDEM_CHECK_BUILT)
#define TANDEM_CHECK_REGISTERED(stem)                                                     \
  static_assert(lists(kRegistered, #stem),                                                \
                "CMakeLists.txt calls tandem_component(" #stem "), which has no X(" #stem \
                ") row in cases/registry.cpp");
TANDEM_CMAKE_COMPONENTS(TANDEM_CHECK_REGISTERED)

}  // namespace

#define TANDEM_DECLARE_COMPONENT(stem) Component stem##_component();
TANDEM_COMPONENTS(TANDEM_DECLARE_COMPONENT)

const std::vector<Component>& registry() {
#define TANDEM_LIST_COMPONENT(stem) stem##_component(),
  static const std::vector<Component> components{TANDEM_COMPONENTS(TANDEM_LIST_COMPONENT)};
  return components;
}

const Component* find_component(const std::string& name) {
  const auto& r = registry();
  const auto it =
      std::find_if(r.begin(), r.end(), [&](const Component& c) { return c.name == name; });
  return it == r.end() ? nullptr : &*it;
}

}  // namespace tandem
