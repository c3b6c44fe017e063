// The CPU codec: encoder.h (encode_chunk) and decoder.h (decode_frame) over the format of
// format.h, with the workspace of workspace.h.
#pragma once

#include "decoder.h"
#include "encoder.h"
#include "format.h"
#include "workspace.h"
