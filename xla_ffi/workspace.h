// Scratch of the CPU codec for one chunk: the handler hands each worker one block of
// workspace_bytes(rows, dim) bytes, carved here into the arrays the encoder and decoder use.
#pragma once

#include "format.h"

namespace lc {

struct Workspace {
  uint32_t* codes;      // [n] quantization codes
  uint32_t* outliers;   // [n] outlier positions
  float* dict_vals;     // [n] decoder: dictionary values; encoder: dictionary codes (as u32)
  uint8_t* ok;          // [n] encoder: value honoured by its code
  int32_t* hash;        // [hash_size] row hash table
  uint32_t* dict_rows;  // [rows] encoder: dictionary entry of each distinct input row
  uint32_t* index;      // [rows] dictionary index of each row
  uint8_t* uvals;       // [n * 4 bytes] encoder: distinct input rows, compacted
  uint32_t* frow;       // [rows] encoder: distinct input row of each row
  uint32_t* ostart;     // [rows] encoder: first outlier of each distinct input row
  uint32_t* ocount;     // [rows] encoder: outliers of each distinct input row
  uint32_t* first;      // [rows] encoder: first row of each distinct row (dedup_rows)
  uint32_t* freq;       // [kMaxHuffSymbols]
  uint32_t* tmp;        // [kMaxHuffSymbols] Huffman scratch / decode table
  uint32_t* hist;       // [2 * kMaxHuffSymbols] encoder: histogram tables
  float* lut;           // [kMaxHuffSymbols] decoder: value of each code
  uint64_t* sorted;     // [kMaxHuffSymbols]
  uint16_t* code_a;     // [kMaxHuffSymbols] codes section Huffman codes
  uint16_t* code_b;     // [kMaxHuffSymbols] index section Huffman codes
  uint8_t* len_a;       // [kMaxHuffSymbols]
  uint8_t* len_b;       // [kMaxHuffSymbols]
  uint32_t hash_size;
};

LC_HD uint32_t hash_size_for(uint64_t rows) {
  uint32_t h = 16;
  while (h < 2 * rows) h <<= 1;
  return h;
}
LC_HD size_t align16(size_t v) { return (v + 15) & ~(size_t)15; }
LC_HD size_t workspace_bytes(uint64_t rows, uint64_t dim) {
  uint64_t n = rows * dim;
  size_t b = 0;
  b += align16(4 * n) * 3 + align16(n);               // codes, outliers, dict_vals, ok
  b += align16(4 * (size_t)hash_size_for(rows));      // hash
  b += align16(4 * rows) * 6 + align16(4 * n);        // dict_rows, index, frow, ostart, ocount, first, uvals
  b += align16(4 * kMaxHuffSymbols) * 5;              // freq, tmp, hist, lut
  b += align16(8 * kMaxHuffSymbols);                  // sorted
  b += align16(2 * kMaxHuffSymbols) * 2 + align16(kMaxHuffSymbols) * 2;
  return b;
}
LC_HD Workspace carve_workspace(uint8_t* base, uint64_t rows, uint64_t dim) {
  Workspace w;
  uint64_t n = rows * dim;
  size_t o = 0;
  w.codes = (uint32_t*)(base + o); o += align16(4 * n);
  w.outliers = (uint32_t*)(base + o); o += align16(4 * n);
  w.dict_vals = (float*)(base + o); o += align16(4 * n);
  w.ok = base + o; o += align16(n);
  w.hash_size = hash_size_for(rows);
  w.hash = (int32_t*)(base + o); o += align16(4 * (size_t)w.hash_size);
  w.dict_rows = (uint32_t*)(base + o); o += align16(4 * rows);
  w.index = (uint32_t*)(base + o); o += align16(4 * rows);
  w.frow = (uint32_t*)(base + o); o += align16(4 * rows);
  w.ostart = (uint32_t*)(base + o); o += align16(4 * rows);
  w.ocount = (uint32_t*)(base + o); o += align16(4 * rows);
  w.first = (uint32_t*)(base + o); o += align16(4 * rows);
  w.uvals = base + o; o += align16(4 * n);
  w.freq = (uint32_t*)(base + o); o += align16(4 * kMaxHuffSymbols);
  w.tmp = (uint32_t*)(base + o); o += align16(4 * kMaxHuffSymbols);
  w.hist = (uint32_t*)(base + o); o += align16(8 * kMaxHuffSymbols);
  w.lut = (float*)(base + o); o += align16(4 * kMaxHuffSymbols);
  w.sorted = (uint64_t*)(base + o); o += align16(8 * kMaxHuffSymbols);
  w.code_a = (uint16_t*)(base + o); o += align16(2 * kMaxHuffSymbols);
  w.code_b = (uint16_t*)(base + o); o += align16(2 * kMaxHuffSymbols);
  w.len_a = base + o; o += align16(kMaxHuffSymbols);
  w.len_b = base + o; o += align16(kMaxHuffSymbols);
  return w;
}

}  // namespace lc
