#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "pig/runtime/kernel_plugin.h"
#include "pig/runtime/lsh_kernels.h"

namespace pig::runtime::lsh {

const char *to_string(DType t) { return spec::name(t); }

bool parse_dtype(const std::string &name, DType &out) {
  const std::optional<DType> t = spec::parse_dtype(name);
  if (t)
    out = *t;
  return t.has_value();
}

const char *to_string(Target t) { return t == Target::cpu ? "cpu" : "cuda"; }

std::string KernelKey::str() const {
  std::string s = config().str();
  s.append(" ").append(to_string(target));
  if (!(schedule == Schedule{}))
    s.append(" [").append(schedule.str()).append("]");
  return s;
}

KernelRegistry &KernelRegistry::global() {
  static KernelRegistry registry; // constructed on first use: safe from static registrars
  return registry;
}

void KernelRegistry::add(const KernelKey &key, KernelSetFactory factory) {
  if (!factory)
    throw std::invalid_argument("KernelRegistry::add: null factory for " + key.str());
  for (Entry &e : entries_)
    if (e.key == key) {
      e.factory = factory;
      return;
    }
  entries_.push_back({key, factory});
}

bool KernelRegistry::has_specialised(const KernelKey &key) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry &e) { return e.key == key; });
}

std::vector<KernelKey> KernelRegistry::keys() const {
  std::vector<KernelKey> out;
  for (const Entry &e : entries_)
    out.push_back(e.key);
  return out;
}

LshKernelSet KernelRegistry::resolve(const KernelKey &key) const {
  if (const std::string e = key.config().validate(); !e.empty())
    throw std::invalid_argument("LSH kernels: no kernel can serve " + key.str() + ": " + e);
  if (key.target != Target::cpu)
    throw std::invalid_argument("LSH kernels: the CPU registry cannot serve " + key.str());
  KernelKey fallback = key;
  fallback.schedule = Schedule{};
  for (const KernelKey &want : {key, fallback})
    for (const Entry &e : entries_)
      if (e.key == want) {
        LshKernelSet s = e.factory();
        s.key = want;
        s.specialised = true;
        s.schedule_fallback = !(want == key);
        s.requested_schedule = key.schedule;
        return s;
      }
  LshKernelSet s = generic_kernel_set();
  s.key = fallback;
  s.specialised = false;
  s.schedule_fallback = !(fallback == key);
  s.requested_schedule = key.schedule;
  return s;
}

std::string KernelRegistry::describe(const LshKernelSet &set) {
  KernelKey plain = set.key;
  plain.schedule = Schedule{};
  std::string s = std::string(set.specialised ? "specialised " : "generic ") + plain.str() +
                  " on " + set.simd_target + ", schedule " + set.key.schedule.str();
  if (!set.specialised)
    s += " (no specialisation registered)";
  if (set.schedule_fallback)
    s += " (schedule " + set.requested_schedule.str() + " not registered: default served)";
  return s;
}

} // namespace pig::runtime::lsh

// --- kernel libraries of their own (kernel_plugin.h) ----------------------------------------
namespace pig::runtime::lsh {
namespace {
std::mutex plugin_mu;
std::map<std::string, std::vector<KernelKey>> &Plugins() { // path -> what it registered
  static std::map<std::string, std::vector<KernelKey>> loaded;
  return loaded;
}
std::vector<KernelKey> &PluginOrder() {
  static std::vector<KernelKey> keys;
  return keys;
}
} // namespace

std::vector<KernelKey> LoadKernelPlugin(const std::string &path) {
  std::lock_guard lock(plugin_mu);
  if (auto it = Plugins().find(path); it != Plugins().end())
    return it->second;
  // RTLD_LOCAL: the library's own symbols (its Highway dispatch tables) stay its own.
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *e = dlerror();
    throw std::runtime_error("kernel library " + path + ": " + (e ? e : "dlopen failed"));
  }
  auto entry = reinterpret_cast<KernelPluginFn>(dlsym(handle, "pig_kernel_plugin"));
  if (!entry) {
    dlclose(handle);
    throw std::runtime_error("kernel library " + path +
                             ": no pig_kernel_plugin (not built from pig-kernel-tree's output)");
  }
  std::size_t count = 0;
  const KernelPluginEntry *entries =
      entry(kKernelPluginAbi, sizeof(LshKernelSet), sizeof(KernelKey), &count);
  if (!entries) {
    dlclose(handle);
    throw std::runtime_error("kernel library " + path +
                             ": built from other pig headers (kernel plugin ABI " +
                             std::to_string(kKernelPluginAbi) +
                             " or the kernel set's layout differ): regenerate it with this "
                             "pig's pig-kernel-tree");
  }
  std::vector<KernelKey> keys;
  for (std::size_t i = 0; i < count; ++i) {
    KernelRegistry::global().add(entries[i].key, entries[i].factory);
    keys.push_back(entries[i].key);
  }
  // Never dlclose'd: the registry holds the library's factories for the process's life.
  Plugins()[path] = keys;
  PluginOrder().insert(PluginOrder().end(), keys.begin(), keys.end());
  return keys;
}

std::vector<KernelKey> LoadedKernelPluginKeys() {
  std::lock_guard lock(plugin_mu);
  return PluginOrder();
}

} // namespace pig::runtime::lsh
