#pragma once
// The switches (ArchTraits) of every architecture kvscope runs.
#include <string>
#include <vector>

#include "model/model_config.h"

namespace kvscope {

// Throws ModelError naming the architecture and listing the supported ones.
ArchTraits traits_for(const std::string& arch);

}  // namespace kvscope
