#include "testing/corpus.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

namespace memplan::testing {

const std::vector<std::string>& TestCorpus() {
  static const std::vector<std::string> models = {
      "resnet18",    "resnet50",        "vgg16",     "mobilenet_v2", "vit_b_16", "gpt",
      "densenet121", "efficientnet_b0", "googlenet", "swin_t",       "gpt_deep",
  };
  return models;
}

const std::vector<std::string>& DynamoCorpus() {
  static const std::vector<std::string> models = {
      "resnet18_dynamo", "resnet50_dynamo",        "mobilenet_v2_dynamo", "vit_b_16_dynamo",
      "gpt_dynamo",      "efficientnet_b0_dynamo", "swin_t_dynamo",
  };
  return models;
}

const std::vector<std::string>& HuggingFaceCorpus() {
  static const std::vector<std::string> models = {
      "hf_llama_dynamo",
      "hf_bert_dynamo",
      "hf_gpt2_dynamo",
      "hf_vit_dynamo",
  };
  return models;
}

std::string ModelCacheDir() {
  const char* env = std::getenv("MEMPLAN_MODEL_CACHE");
  return env && *env ? env : MEMPLAN_MODEL_CACHE;
}

std::string CorpusModel(const std::string& name) {
  std::string path = ModelCacheDir() + "/" + name + ".onnx";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return path;
  std::string cmd = MEMPLAN_PYTHON " " MEMPLAN_SOURCE_DIR "/samples/export_models.py --out '" +
                    ModelCacheDir() + "' --models " + name + " > /dev/null";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "exporting " << name << " failed: " << cmd;
  return path;
}

}  // namespace memplan::testing
