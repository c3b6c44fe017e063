// Canonical Huffman coding of the frame's sections: code lengths (Moffat-Katajainen, limited to
// kMaxHuffLen), canonical codes and decode tables, the section plan (Huffman or bit-packed,
// whichever is smaller), the section writer, and the segment decoder (segments of kSeg symbols
// decode independently; two at a time, interleaved, on the CPU; one per thread on the GPU).
#pragma once

#include "bitio.h"
#include "format.h"

namespace lc {

// ---------------------------------------------------------------- Huffman (canonical)
// Code lengths in three shared steps (the CPU runs them one after another in huff_lengths; the
// GPU encoder runs the first on one thread in shared memory on frequencies the block already
// sorted, and the other two across the block):
//  * huff_mk_depths: Moffat & Katajainen's in-place minimum-redundancy algorithm (WADS 1995)
//    on A[0..n) (n >= 2 frequencies, ascending): afterwards A[i] is the depth (unlimited code
//    length) of the i-th leaf (its first two passes are huff_mk_internal_depths; the GPU counts
//    the leaves per depth from the internal nodes' depths instead, huff_leaf_counts);
//  * huff_limit_counts: leaves per length (count[1..32], depths over 32 counted at 32) limited
//    to kMaxHuffLen by the Kraft repair of zlib/miniz;
//  * huff_rank_length: the length of the r-th most frequent symbol (r = 0: the most frequent,
//    which takes the shortest length).
// Its first two passes (the two-queue merge, then each internal node's depth from its parent's):
// afterwards A[0..n-1) holds the depths of the n - 1 internal nodes (A[n - 2], the root, 0).
LC_HD void huff_mk_internal_depths(uint32_t* A, int n) {
  int root = 0, leaf = 2, next;
  A[0] += A[1];
  for (next = 1; next < n - 1; ++next) {
    if (leaf >= n || A[root] < A[leaf]) { A[next] = A[root]; A[root++] = (uint32_t)next; }
    else A[next] = A[leaf++];
    if (leaf >= n || (root < next && A[root] < A[leaf])) { A[next] += A[root]; A[root++] = (uint32_t)next; }
    else A[next] += A[leaf++];
  }
  A[n - 2] = 0;
  for (next = n - 3; next >= 0; --next) A[next] = A[A[next]] + 1;
}

// Leaves per depth of a full binary tree of n leaves from its internal nodes per depth: on
// entry count[d] (d < 32) is the number of internal nodes of depth d; afterwards count[d] is the
// number of leaves of depth d, depths of 32 and more counted at 32, as huff_limit_counts wants
// (the nodes of depth d + 1 are the 2 count[d] children of depth d, the leaves among them those
// that are not internal). The same counts as the leaf depths huff_mk_depths gives.
LC_HD void huff_leaf_counts(uint32_t* count, uint32_t n) {
  uint32_t internal = count[0], leaves = 0;
  count[0] = 0;
  for (int d = 1; d < 32; ++d) {
    const uint32_t next = count[d];
    count[d] = 2 * internal - next;
    leaves += count[d];
    internal = next;
  }
  count[32] = n - leaves;
}

LC_HD void huff_mk_depths(uint32_t* A, int n) {
  huff_mk_internal_depths(A, n);
  int avbl = 1, used = 0, dpth = 0;
  int root = n - 2, next = n - 1;
  while (avbl > 0) {
    while (root >= 0 && (int)A[root] == dpth) { ++used; --root; }
    while (avbl > used) { A[next--] = (uint32_t)dpth; --avbl; }
    avbl = 2 * used; ++dpth; used = 0;
  }
}

// count[0..32]: count[l] leaves of depth l (l = 32: 32 or more); afterwards no length exceeds
// kMaxHuffLen and Kraft's sum is exactly one.
LC_HD void huff_limit_counts(uint32_t* count) {
  for (int i = kMaxHuffLen + 1; i <= 32; ++i) { count[kMaxHuffLen] += count[i]; count[i] = 0; }
  uint32_t total = 0;
  for (int i = kMaxHuffLen; i > 0; --i) total += count[i] << (kMaxHuffLen - i);
  while (total != (1u << kMaxHuffLen)) {
    count[kMaxHuffLen]--;
    for (int i = kMaxHuffLen - 1; i > 0; --i)
      if (count[i]) { count[i]--; count[i + 1] += 2; break; }
    total--;
  }
}

LC_HD int huff_rank_length(const uint32_t* count, uint32_t r) {
  uint32_t c = 0;
  for (int l = 1; l < kMaxHuffLen; ++l) {
    c += count[l];
    if (r < c) return l;
  }
  return kMaxHuffLen;
}

// Code lengths for freq[0..nsym) limited to kMaxHuffLen; symbols with freq 0 get length 0.
// tmp needs 2 * nsym uint32 (sorted pairs, lengths). One used symbol gets length 1.
LC_HD void huff_lengths(const uint32_t* freq, int nsym, uint8_t* len, uint64_t* sorted,
                        uint32_t* A) {
  int n = 0;
  for (int s = 0; s < nsym; ++s) {
    len[s] = 0;
    if (freq[s]) sorted[n++] = ((uint64_t)freq[s] << 16) | (uint64_t)s;
  }
  if (n == 0) return;
  if (n == 1) { len[sorted[0] & 0xffff] = 1; return; }
  // Shell sort ascending by frequency (small n; no library sort on the device).
  for (int gap = n / 2; gap > 0; gap /= 2)
    for (int i = gap; i < n; ++i) {
      uint64_t v = sorted[i];
      int j = i;
      for (; j >= gap && sorted[j - gap] > v; j -= gap) sorted[j] = sorted[j - gap];
      sorted[j] = v;
    }
  for (int i = 0; i < n; ++i) A[i] = (uint32_t)(sorted[i] >> 16);
  huff_mk_depths(A, n);
  uint32_t count[33];
  for (int i = 0; i <= 32; ++i) count[i] = 0;
  for (int i = 0; i < n; ++i) count[A[i] > 32 ? 32 : A[i]]++;
  huff_limit_counts(count);
  // Most frequent symbols (end of the ascending list) take the shortest lengths.
  for (int k = 0; k < n; ++k) len[sorted[k] & 0xffff] = (uint8_t)huff_rank_length(count, (uint32_t)(n - 1 - k));
}

// Canonical codes (bit-reversed for LSB-first streams) from lengths. Returns false when the
// lengths over-subscribe the code space (a corrupt table).
LC_HD bool huff_codes(const uint8_t* len, int nsym, uint16_t* code, int* max_len) {
  uint32_t count[kMaxHuffLen + 1], next[kMaxHuffLen + 2];
  for (int i = 0; i <= kMaxHuffLen; ++i) count[i] = 0;
  int ml = 0;
  for (int s = 0; s < nsym; ++s) {
    if (len[s] > kMaxHuffLen) return false;
    count[len[s]]++;
    if (len[s] > ml) ml = len[s];
  }
  count[0] = 0;
  uint32_t kraft = 0;
  for (int l = 1; l <= kMaxHuffLen; ++l) kraft += count[l] << (kMaxHuffLen - l);
  if (kraft > (1u << kMaxHuffLen)) return false;
  // Deflate's canonical assignment (RFC 1951, sec. 3.2.2).
  uint32_t c = 0;
  for (int l = 1; l <= kMaxHuffLen; ++l) { c = (c + count[l - 1]) << 1; next[l] = c; }
  for (int s = 0; s < nsym; ++s) {
    int l = len[s];
    if (!l) { code[s] = 0; continue; }
    uint32_t v = next[l]++;
    v = ((v & 0x5555u) << 1) | ((v >> 1) & 0x5555u);  // reverse 16 bits, keep the top l
    v = ((v & 0x3333u) << 2) | ((v >> 2) & 0x3333u);
    v = ((v & 0x0f0fu) << 4) | ((v >> 4) & 0x0f0fu);
    v = ((v & 0x00ffu) << 8) | ((v >> 8) & 0x00ffu);
    code[s] = (uint16_t)(v >> (16 - l));
  }
  *max_len = ml;
  return true;
}

// Decode table of 2^table_bits entries: (symbol << 8) | length; length 0 marks a hole.
LC_HD void huff_table(const uint8_t* len, const uint16_t* code, int nsym, int table_bits,
                      uint32_t* table) {
  uint32_t size = 1u << table_bits;
  for (uint32_t i = 0; i < size; ++i) table[i] = 0;
  for (int s = 0; s < nsym; ++s) {
    int l = len[s];
    if (!l) continue;
    for (uint32_t i = code[s]; i < size; i += (1u << l)) table[i] = ((uint32_t)s << 8) | (uint32_t)l;
  }
}

// ---------------------------------------------------------------- Huffman sections
// Scratch of plan_section: freq, tmp and sorted of kMaxHuffSymbols entries, hist of twice that.
struct HuffScratch {
  uint32_t* freq;
  uint32_t* tmp;
  uint32_t* hist;
  uint64_t* sorted;
};

struct SectionPlan {
  bool huff;
  size_t bytes;  // whole section
};

// Huffman section for sym[0..count): lengths and codes into len/code; chosen when smaller than
// bit-packing at `bits` bits. The size follows from the histogram alone.
LC_HD SectionPlan plan_section(const uint32_t* sym, uint64_t count, int nsym, int bits,
                               bool allow_huff, const HuffScratch& w, uint8_t* len, uint16_t* code) {
  SectionPlan p = {false, packed_bytes(count, bits)};
  if (!allow_huff || count == 0 || nsym < 2 || nsym > kMaxHuffSymbols) return p;
  // Four interleaved histograms (the second in tmp, free until huff_lengths): peaked codes
  // (cotangents, most values in the central bin) would otherwise chain every increment
  // through one counter's store-to-load forwarding.
  // Few symbols per counter (dictionary indices) gain nothing from it: one table there.
  uint32_t* const h0 = w.freq;
  uint32_t* const h1 = w.tmp;
  uint32_t* const h2 = w.hist;
  uint32_t* const h3 = w.hist + kMaxHuffSymbols;
  const bool four = count >= 16 * (uint64_t)nsym;
  for (int s = 0; s < nsym; ++s) h0[s] = 0;
  if (four)
    for (int s = 0; s < nsym; ++s) h1[s] = h2[s] = h3[s] = 0;
  const uint64_t n4 = four ? count & ~(uint64_t)3 : 0;
  uint64_t i = 0;
  for (; i < n4; i += 4) {
    h0[sym[i]]++;
    h1[sym[i + 1]]++;
    h2[sym[i + 2]]++;
    h3[sym[i + 3]]++;
  }
  for (; i < count; ++i) h0[sym[i]]++;
  if (four)
    for (int s = 0; s < nsym; ++s) h0[s] += h1[s] + h2[s] + h3[s];
  huff_lengths(w.freq, nsym, len, w.sorted, w.tmp);
  int ml = 0;
  if (!huff_codes(len, nsym, code, &ml)) return p;
  uint64_t total_bits = 0;
  for (int s = 0; s < nsym; ++s) total_bits += (uint64_t)w.freq[s] * len[s];
  size_t b = varint_size((uint64_t)nsym) + (size_t)(nsym + 1) / 2 + 2 * segments_for(count) +
             (size_t)((total_bits + 7) / 8);
  if (b < p.bytes) { p.huff = true; p.bytes = b; }
  return p;
}

// The section's bytes end at or before `limit` (the end of the caller's buffer); the writer may
// store zeros up to 8 bytes past its current position, never past `limit`.
LC_HD uint8_t* write_huff(uint8_t* o, const uint32_t* sym, uint64_t count, int nsym,
                          const uint8_t* len, const uint16_t* code, const uint8_t* limit) {
  o += put_varint(o, (uint64_t)nsym);
  for (int s = 0; s < nsym; s += 2) *o++ = (uint8_t)(len[s] | ((s + 1 < nsym ? len[s + 1] : 0) << 4));
  uint8_t* seg_len = o;  // filled in as the segments are written
  o += 2 * segments_for(count);
  // LSB-first: acc holds the nacc (< 8 between groups) bits not yet stored at o.
  uint64_t acc = 0;
  uint32_t nacc = 0;
  uint64_t k = 0;
  for (uint64_t s0 = 0; s0 < count; s0 += kSeg, ++k) {
    uint64_t s1 = s0 + kSeg < count ? s0 + kSeg : count;
    uint32_t bits = 0;
    uint64_t i = s0;
    // Four codes (<= 4 * kMaxHuffLen = 48 bits) per group, then every whole byte goes out in
    // one 8-byte store: no data-dependent branch (zeros above the carried bits).
    for (; i + 4 <= s1 && limit - o >= 8; i += 4) {
      const uint32_t a = sym[i], b = sym[i + 1], c = sym[i + 2], d = sym[i + 3];
      const uint32_t la = len[a], lb = len[b], lc_ = len[c], ld = len[d];
      const uint64_t v = (uint64_t)(code[a] | ((uint32_t)code[b] << la)) |
                         ((uint64_t)(code[c] | ((uint32_t)code[d] << lc_)) << (la + lb));
      const uint32_t nb = la + lb + lc_ + ld;
      acc |= v << nacc;
      nacc += nb;
      bits += nb;
      put_u64(o, acc);
      o += nacc >> 3;
      acc >>= nacc & ~7u;
      nacc &= 7u;
    }
    for (; i < s1; ++i) {
      const uint32_t v = sym[i];
      acc |= (uint64_t)code[v] << nacc;
      nacc += len[v];
      bits += len[v];
      for (; nacc >= 8; nacc -= 8, acc >>= 8) *o++ = (uint8_t)acc;
    }
    seg_len[2 * k] = (uint8_t)bits;
    seg_len[2 * k + 1] = (uint8_t)(bits >> 8);
  }
  if (nacc) *o++ = (uint8_t)acc;
  return o;
}

// Reads one Huffman section's code table into len/code/table; false if malformed.
LC_HD bool read_huff_table(Reader& r, int max_nsym, uint8_t* len, uint16_t* code,
                           uint32_t* table, int* table_bits, int* nsym_out) {
  uint64_t nsym = r.varint((uint64_t)max_nsym);
  if (!r.ok || nsym < 1) return false;
  const uint8_t* nib = r.take((size_t)(nsym + 1) / 2);
  if (!nib) return false;
  for (uint64_t s = 0; s < nsym; ++s) len[s] = (uint8_t)((nib[s / 2] >> (4 * (s & 1))) & 15);
  int ml = 0;
  if (!huff_codes(len, (int)nsym, code, &ml) || ml == 0) return false;
  huff_table(len, code, (int)nsym, ml, table);
  *table_bits = ml;
  *nsym_out = (int)nsym;
  return true;
}

// One segment being decoded: its reader (positioned at the segment's first bit), the next
// symbol index, the end index, and the bits consumed so far.
struct SegCursor {
  BitReader br;
  uint64_t i, s1, bits;
};

LC_HD SegCursor seg_cursor(const uint8_t* sp, size_t bytes, uint64_t bit_off, uint64_t s0,
                           uint64_t s1) {
  SegCursor c = {{sp + bit_off / 8, sp + bytes, 0, 0, false}, s0, s1, 0};
  c.br.peek(8);
  c.br.skip((int)(bit_off % 8));
  return c;
}

// Four symbols after one refill (4 x 12 bits fit in the 56 bits a refill guarantees).
template <typename EmitFn>
LC_HD bool seg_step4(SegCursor& c, const uint32_t* table, uint64_t mask, EmitFn& emit) {
  c.br.refill();
  for (int j = 0; j < 4; ++j) {
    uint32_t e = table[c.br.acc & mask];
    int l = (int)(e & 0xff);
    if (l == 0) return false;
    c.br.acc >>= l;
    c.br.nacc -= l;
    c.bits += (uint64_t)l;
    emit(c.i + j, e >> 8);
  }
  c.i += 4;
  return true;
}

template <typename EmitFn>
LC_HD bool seg_finish(SegCursor& c, const uint32_t* table, int tb, uint64_t mask, EmitFn& emit) {
  while (c.i + 4 <= c.s1 && c.br.end - c.br.p >= 8)
    if (!seg_step4(c, table, mask, emit)) return false;
  for (; c.i < c.s1; ++c.i) {
    uint32_t e = table[c.br.peek(tb)];
    int l = (int)(e & 0xff);
    if (l == 0) return false;
    c.br.skip(l);
    c.bits += (uint64_t)l;
    emit(c.i, e >> 8);
  }
  return !c.br.overrun;
}

// Two-symbol decode table over the same tb-bit index as `table` ((sym << 8) | len entries):
// len1 + len2 | (two ? 32 : 0) | sym1 << 6 | sym2 << 18, where `two` says that the bits after
// the first code hold a whole second one within the tb-bit window (so len1 + len2 <= tb);
// 0 for a hole. Returns how many entries hold two symbols.
LC_HD uint32_t huff_pair_table(const uint32_t* table, int tb, uint32_t* pair) {
  uint32_t twos = 0;
  for (uint32_t x = 0; x < (1u << tb); ++x) {
    const uint32_t e1 = table[x], l1 = e1 & 0xff;
    uint32_t v = l1 ? l1 | ((e1 >> 8) << 6) : 0;
    if (l1) {
      const uint32_t e2 = table[x >> l1], l2 = e2 & 0xff;
      if (l2 && l2 <= (uint32_t)tb - l1) {
        v = (l1 + l2) | 32u | ((e1 >> 8) << 6) | ((e2 >> 8) << 18);
        ++twos;
      }
    }
    pair[x] = v;
  }
  return twos;
}

// Two segments decoded interleaved with the two-symbol table while each has 8 symbols and 8
// readable bytes left: four lookups per refill (<= 4 * tb <= 48 bits), one or two symbols
// each. A lone symbol's second emit lands on the next position, which the next lookup (or
// seg_finish) overwrites with the right value. A hole is noted and reported at the end (it
// consumes no bits; the symbol count bounds the loop). Leaves the cursors for seg_finish;
// bits consumed = bit position - the segment's offset.
template <typename EmitFn>
LC_HD bool huff_pair_bulk(SegCursor& a, SegCursor& b, const uint8_t* sp, uint64_t off_a,
                          uint64_t off_b, const uint32_t* pair, uint64_t mask, EmitFn& emit) {
  const uint8_t* pa = a.br.p;
  const uint8_t* pb = b.br.p;
  const uint8_t* const end = a.br.end;
  uint64_t acc_a = a.br.acc, acc_b = b.br.acc, i = a.i, j = b.i;
  int na = a.br.nacc, nb = b.br.nacc;
  uint32_t hole = 0;
  while (i + 8 <= a.s1 && j + 8 <= b.s1 && end - pa >= 8 && end - pb >= 8) {
    uint64_t wa, wb;  // branchless refill, as BitReader::refill
    memcpy(&wa, pa, 8);
    memcpy(&wb, pb, 8);
    acc_a |= wa << na;
    acc_b |= wb << nb;
    pa += (63 - na) >> 3;
    pb += (63 - nb) >> 3;
    na |= 56;
    nb |= 56;
    for (int q = 0; q < 4; ++q) {
      const uint32_t ea = pair[acc_a & mask], eb = pair[acc_b & mask];
      const int la = (int)(ea & 31), lb = (int)(eb & 31);
      acc_a >>= la;
      acc_b >>= lb;
      na -= la;
      nb -= lb;
      hole |= (uint32_t)(la == 0) | (uint32_t)(lb == 0);
      emit(i, (ea >> 6) & 0xfff);
      emit(i + 1, ea >> 18);
      emit(j, (eb >> 6) & 0xfff);
      emit(j + 1, eb >> 18);
      i += 1 + ((ea >> 5) & 1);
      j += 1 + ((eb >> 5) & 1);
    }
  }
  a.br.p = pa; a.br.acc = acc_a; a.br.nacc = na; a.i = i;
  b.br.p = pb; b.br.acc = acc_b; b.br.nacc = nb; b.i = j;
  a.bits = (uint64_t)(pa - sp) * 8 - (uint64_t)na - off_a;
  b.bits = (uint64_t)(pb - sp) * 8 - (uint64_t)nb - off_b;
  return hole == 0;
}

// Decodes `count` Huffman symbols, calling emit(i, sym); false on a malformed stream (a hole in
// the code table, or a segment whose codes do not add up to its declared length). Segments
// start at the sum of the lengths before them; two are decoded at a time, interleaved, so the
// table-lookup chains of both overlap.
template <typename EmitFn>
LC_HD bool read_huff_symbols(Reader& r, uint64_t count, const uint32_t* table, int tb,
                             EmitFn& emit, uint32_t* pair_scratch = nullptr) {
  const uint64_t nseg = segments_for(count);
  const uint8_t* seg_len = r.take(2 * (size_t)nseg);
  if (!seg_len) return false;
  uint64_t total = 0;
  for (uint64_t k = 0; k < nseg; ++k) total += (uint32_t)seg_len[2 * k] | ((uint32_t)seg_len[2 * k + 1] << 8);
  const size_t bytes = (size_t)((total + 7) / 8);
  const uint8_t* sp = r.take(bytes);
  if (!sp) return false;
  const uint64_t mask = (1ull << tb) - 1;
  // Long sections of short codes (an optimal code's bits are near uniform, so the share of
  // two-symbol entries is the share of lookups that yield two) take the two-symbol table.
  const bool pairs = pair_scratch && count >= (4ull << tb) &&
                     2 * huff_pair_table(table, tb, pair_scratch) >= (1u << tb);
  uint64_t off = 0;  // bit offset of segment k
  for (uint64_t k = 0; k < nseg; k += 2) {
    const uint64_t la = (uint32_t)seg_len[2 * k] | ((uint32_t)seg_len[2 * k + 1] << 8);
    const uint64_t s0 = k * kSeg, s1 = s0 + kSeg < count ? s0 + kSeg : count;
    SegCursor a = seg_cursor(sp, bytes, off, s0, s1);
    if (k + 1 < nseg) {
      const uint64_t lb = (uint32_t)seg_len[2 * k + 2] | ((uint32_t)seg_len[2 * k + 3] << 8);
      const uint64_t t1 = s1 + kSeg < count ? s1 + kSeg : count;
      SegCursor b = seg_cursor(sp, bytes, off + la, s1, t1);
      if (pairs && !huff_pair_bulk(a, b, sp, off, off + la, pair_scratch, mask, emit)) return false;
      while (a.i + 4 <= a.s1 && b.i + 4 <= b.s1 && a.br.end - a.br.p >= 8 && b.br.end - b.br.p >= 8)
        if (!seg_step4(a, table, mask, emit) || !seg_step4(b, table, mask, emit)) return false;
      if (!seg_finish(b, table, tb, mask, emit) || b.bits != lb) return false;
      off += lb;
    }
    if (!seg_finish(a, table, tb, mask, emit) || a.bits != la) return false;
    off += la;
  }
  return true;
}

}  // namespace lc
