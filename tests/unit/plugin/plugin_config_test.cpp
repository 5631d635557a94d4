#include "plugin/core/plugin_config.hpp"

#include <gtest/gtest.h>

namespace cushare::plugin {
namespace {

std::string error_of(const std::string& json) {
  try {
    validate_config(parse_config_json(json));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginConfig, DefaultsAreValid) {
  PluginConfig c;
  EXPECT_NO_THROW(validate_config(c));
  EXPECT_EQ(c.resource_name, "cushare.io/vgpu");
  EXPECT_EQ(c.units_per_gpu, 100u);
  EXPECT_EQ(c.packing, PackingPolicy::kBestFit);
  EXPECT_EQ(c.gpu_spanning, GpuSpanning::kNone);
  EXPECT_EQ(c.ignored_xids, (std::vector<unsigned long long>{13, 31, 43, 45, 68, 109}));
}

TEST(PluginConfig, ParsesEveryKindOfValue) {
  const auto c = parse_config_json(R"({
    "unitsPerGpu": 10, "memoryRatio": 0.9, "computeRatio": 1,
    "computeMode": "capped", "packing": "spread", "gpuSpanning": "whole", "deviceSpecs": "dev-nodes",
    "cdiKind": "nvidia.com/gpu", "ldSoPreload": false, "runDir": "/run/x",
    "ignoredXids": [13, 48], "cleanupMinAgeSeconds": 5, "orphanAgeSeconds": 10,
    "logLevel": "debug"
  })");
  EXPECT_NO_THROW(validate_config(c));
  EXPECT_EQ(c.units_per_gpu, 10u);
  EXPECT_DOUBLE_EQ(c.memory_ratio, 0.9);
  EXPECT_EQ(c.compute_mode, shm::ComputeMode::kCapped);
  EXPECT_EQ(c.packing, PackingPolicy::kSpread);
  EXPECT_EQ(c.gpu_spanning, GpuSpanning::kWhole);
  EXPECT_EQ(c.device_specs, DeviceSpecStrategy::kDevNodes);
  EXPECT_EQ(c.cdi_kind, "nvidia.com/gpu");
  EXPECT_FALSE(c.ld_so_preload);
  EXPECT_EQ(c.run_dir, "/run/x");
  EXPECT_EQ(c.ignored_xids, (std::vector<unsigned long long>{13, 48}));
  EXPECT_EQ(c.cleanup_min_age.count(), 5);
  EXPECT_EQ(c.log_level, "debug");
}

TEST(PluginConfig, AbsentKeysKeepTheBase) {
  PluginConfig base;
  base.units_per_gpu = 7;
  const auto c = parse_config_json(R"({"packing": "spread"})", base);
  EXPECT_EQ(c.units_per_gpu, 7u);
  EXPECT_EQ(c.packing, PackingPolicy::kSpread);
}

TEST(PluginConfig, BadConfigsNameTheProblem) {
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"unitsPerGPU": 10})").find("unknown config key 'unitsPerGPU'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"unitsPerGpu": "10"})").find("'unitsPerGpu'"), std::string::npos);
  EXPECT_NE(error_of(R"({"unitsPerGpu": -1})").find("'unitsPerGpu'"), std::string::npos);
  EXPECT_NE(error_of(R"({"unitsPerGpu": 0})").find("unitsPerGpu must be between"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"packing": "tight"})").find("unknown packing policy 'tight'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"gpuSpanning": "some"})").find("config key 'gpuSpanning': unknown GPU"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"computeMode": "fast"})").find("'computeMode'"), std::string::npos);
  EXPECT_NE(error_of(R"({"memoryRatio": 1.5})").find("memoryRatio"), std::string::npos);
  EXPECT_NE(error_of(R"({"computeRatio": 0})").find("computeRatio"), std::string::npos);
  EXPECT_NE(error_of(R"({"resourceName": "vgpu"})").find("resourceName"), std::string::npos);
  EXPECT_NE(error_of(R"({"runDir": "relative/dir"})").find("runDir must be an absolute path"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"socketName": "a/b.sock"})").find("socketName"), std::string::npos);
  EXPECT_NE(error_of(R"({"cdiKind": "nvidia"})").find("cdiKind"), std::string::npos);
  EXPECT_NE(error_of(R"({"logLevel": "loud"})").find("logLevel"), std::string::npos);
  EXPECT_NE(error_of(R"({"ignoredXids": [13, "x"]})").find("ignoredXids"), std::string::npos);
  EXPECT_NE(error_of(R"({"orphanAgeSeconds": 1})").find("orphanAgeSeconds"), std::string::npos);
}

TEST(PluginConfig, MissingFileIsAClearError) {
  try {
    load_config_file("/nonexistent/cushare-plugin.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/cushare-plugin.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace cushare::plugin
