// Reading a possibly compressed input file block by block (see input_stream.h).
#include "prepare/input_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace spmd {
namespace {

constexpr size_t kFileBlockBytes = size_t{1} << 20;

Compression sniff(const std::string& head) {
  auto starts = [&](const char* magic, size_t n) {
    return head.size() >= n && std::memcmp(head.data(), magic, n) == 0;
  };
  if (starts("\x1f\x8b", 2)) return Compression::kGzip;
  if (starts("\x28\xb5\x2f\xfd", 4)) return Compression::kZstd;
  return Compression::kNone;
}

}  // namespace

struct InputStream::Decoder {
  z_stream gzip{};
  bool gzip_open = false;
  bool gzip_member_done = false;  // between two gzip members (or at the end of the last one)
  ZSTD_DStream* zstd = nullptr;
  size_t zstd_last = 0;  // ZSTD_decompressStream's last hint: 0 = a frame just ended
  ~Decoder() {
    if (gzip_open) inflateEnd(&gzip);
    if (zstd != nullptr) ZSTD_freeDStream(zstd);
  }
};

InputStream::InputStream(const std::string& path) : path_(path), decoder_(new Decoder) {
  file_ = std::fopen(path.c_str(), "rb");
  SPMD_CHECK(file_ != nullptr, "{}: cannot open: {}", path, std::strerror(errno));
  refill();
  compression_ = sniff(in_);
  if (compression_ == Compression::kGzip) {
    SPMD_CHECK(inflateInit2(&decoder_->gzip, 15 + 16) == Z_OK, "{}: zlib cannot start", path);
    decoder_->gzip_open = true;
  } else if (compression_ == Compression::kZstd) {
    decoder_->zstd = ZSTD_createDStream();
    SPMD_CHECK(decoder_->zstd != nullptr, "{}: libzstd cannot start", path);
    ZSTD_initDStream(decoder_->zstd);
  }
}

InputStream::~InputStream() {
  if (file_ != nullptr) std::fclose(file_);
}

bool InputStream::refill() {
  if (file_done_) return false;
  in_.erase(0, in_pos_);
  in_pos_ = 0;
  const size_t old = in_.size();
  in_.resize(old + kFileBlockBytes);
  const size_t got = std::fread(&in_[old], 1, kFileBlockBytes, file_);
  in_.resize(old + got);
  file_bytes_read_ += got;
  if (got < kFileBlockBytes) {
    SPMD_CHECK(!std::ferror(file_), "{}: read failed: {}", path_, std::strerror(errno));
    file_done_ = true;
  }
  return got > 0;
}

size_t InputStream::read(std::string& out, size_t max_bytes) {
  const size_t old = out.size();
  out.resize(old + max_bytes);
  size_t got = 0;
  for (;;) {
    const size_t consumed_before = in_pos_;
    got = decode(&out[old], max_bytes);
    if (got > 0) break;
    if (in_pos_ != consumed_before) continue;  // a header was consumed: decode on
    if (!refill()) break;
  }
  out.resize(old + got);
  if (got == 0 && compression_ == Compression::kGzip)
    SPMD_CHECK(decoder_->gzip_member_done, "{}: truncated gzip data", path_);
  if (got == 0 && compression_ == Compression::kZstd)
    SPMD_CHECK(decoder_->zstd_last == 0, "{}: truncated zstd data", path_);
  return got;
}

// Decodes what in_ holds into dst (at most cap bytes); 0 when in_ needs more of the file.
size_t InputStream::decode(char* dst, size_t cap) {
  const size_t avail = in_.size() - in_pos_;
  if (compression_ == Compression::kNone) {
    const size_t n = std::min(avail, cap);
    std::memcpy(dst, in_.data() + in_pos_, n);
    in_pos_ += n;
    return n;
  }
  if (avail == 0) return 0;
  if (compression_ == Compression::kZstd) {
    ZSTD_inBuffer in{in_.data() + in_pos_, avail, 0};
    ZSTD_outBuffer outb{dst, cap, 0};
    const size_t rc = ZSTD_decompressStream(decoder_->zstd, &outb, &in);
    SPMD_CHECK(!ZSTD_isError(rc), "{}: corrupt zstd data: {}", path_, ZSTD_getErrorName(rc));
    decoder_->zstd_last = rc;
    in_pos_ += in.pos;
    return outb.pos;
  }
  z_stream& z = decoder_->gzip;
  if (decoder_->gzip_member_done) {  // another member follows: gzip files may be concatenated
    inflateReset(&z);
    decoder_->gzip_member_done = false;
  }
  z.next_in = reinterpret_cast<Bytef*>(&in_[in_pos_]);
  z.avail_in = static_cast<uInt>(avail);
  z.next_out = reinterpret_cast<Bytef*>(dst);
  z.avail_out = static_cast<uInt>(cap);
  const int rc = inflate(&z, Z_NO_FLUSH);
  SPMD_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "{}: corrupt gzip data: {}",
             path_, z.msg != nullptr ? z.msg : "inflate failed");
  in_pos_ = in_.size() - z.avail_in;
  if (rc == Z_STREAM_END) decoder_->gzip_member_done = true;
  return cap - z.avail_out;
}

}  // namespace spmd
