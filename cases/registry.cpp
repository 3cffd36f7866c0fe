// The one list of components: `tandem verify` runs their rows in this order, `tandem golden`
// regenerates and checks their cases, and manifests name them. Add a component: its stem files,
// one row here, one tandem_component() call in CMakeLists.txt.
#include <algorithm>

#include "cases/case.hpp"

#define TANDEM_COMPONENTS(X) \
  X(residual)                \
  X(engram)                  \
  X(vision)                  \
  X(attention)               \
  X(moe)                     \
  X(dspark)                  \
  X(model)                   \
  X(dense)                   \
  X(kvcache)

namespace tandem {

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
