#include "daemon/kubelet/kubelet_side.h"

#include <gtest/gtest.h>

#include "daemon/config.h"

namespace gpuslice::daemon::kubelet {
namespace {

TEST(KubeletConfigTest, TakesTheDaemonsKeys) {
  const KubeletConfig defaults = KubeletConfigOf(DaemonConfig{});
  EXPECT_FALSE(defaults.enabled());
  EXPECT_EQ(defaults.kubelet_dir, "/var/lib/kubelet");
  EXPECT_EQ(defaults.cdi_dir, "/var/run/cdi");
  EXPECT_EQ(defaults.limiter_library, "/usr/lib/gpuslice/libgpuslice.so");
  EXPECT_EQ(defaults.claims_dir, "");
  EXPECT_EQ(defaults.ld_so_preload, "");
  EXPECT_EQ(defaults.device_plugin_slices, 10u);
  EXPECT_EQ(defaults.memory_unit_mib, 1u);

  DaemonConfig c;
  c.dra = true;
  c.dra_claims_dir = "/claims";
  c.vgpu_per_gpu = 4;
  c.gpu_memory_unit_mib = 256;
  const KubeletConfig k = KubeletConfigOf(c);
  EXPECT_TRUE(k.enabled());
  EXPECT_TRUE(k.dra);
  EXPECT_FALSE(k.device_plugin);
  EXPECT_EQ(k.claims_dir, "/claims");
  EXPECT_EQ(k.device_plugin_slices, 4u);
  EXPECT_EQ(k.memory_unit_mib, 256u);
}

}  // namespace
}  // namespace gpuslice::daemon::kubelet
