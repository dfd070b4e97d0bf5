//! Response compression on whole bodies, so a compressed form can be kept
//! and served again (the response cache keeps each entry's, the GraphiQL
//! assets are compressed once). API responses use each codec's fastest
//! level; see docs/performance.md.

use std::io::Write;

use http::{header, HeaderMap};

/// Bodies shorter than this are sent as they are: a few hundred bytes
/// saved cost more in CPU and headers than they win on the wire.
pub const MIN_BYTES: usize = 1024;

/// A content coding votegraph can send; `as usize` indexes arrays holding
/// one form per coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Zstd,
    Br,
    Gzip,
}

/// How hard to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// API responses: fast levels (see the module doc).
    Fast,
    /// Static assets compressed once per process: brotli quality 9 and
    /// gzip 9, the last levels that still start up quickly.
    Best,
}

impl Encoding {
    /// Every coding, in the server's order of preference when a client
    /// accepts several equally: the smallest and cheapest first.
    pub const ALL: [Encoding; 3] = [Encoding::Zstd, Encoding::Br, Encoding::Gzip];

    /// The `Content-Encoding` token.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Zstd => "zstd",
            Encoding::Br => "br",
            Encoding::Gzip => "gzip",
        }
    }

    /// The coding to send, among `offered` (in preference order), for the
    /// request's `Accept-Encoding`: the highest `q`, ties to the earlier;
    /// None for identity.
    pub fn negotiate(headers: &HeaderMap, offered: &[Encoding]) -> Option<Encoding> {
        let mut best: Option<(Encoding, f32)> = None;
        for value in headers.get_all(header::ACCEPT_ENCODING) {
            let Ok(value) = value.to_str() else { continue };
            for item in value.split(',') {
                let mut parts = item.split(';');
                let token = parts.next().unwrap_or("").trim();
                let q = quality(parts).clamp(0.0, 1.0);
                if q <= 0.0 {
                    continue;
                }
                let matching = offered
                    .iter()
                    .copied()
                    .filter(|e| token == "*" || token.eq_ignore_ascii_case(e.name()));
                let rank = |e: Encoding| offered.iter().position(|o| *o == e);
                for encoding in matching {
                    if best.is_none_or(|(b, bq)| q > bq || (q == bq && rank(encoding) < rank(b))) {
                        best = Some((encoding, q));
                    }
                }
            }
        }
        best.map(|(e, _)| e)
    }

    /// `data` compressed with this coding; None if the codec failed (the
    /// caller then sends the body as it is).
    pub fn compress(self, data: &[u8], level: Level) -> Option<bytes::Bytes> {
        let out = Vec::with_capacity(data.len() / 4 + 64);
        let compressed = match self {
            Encoding::Zstd => {
                let level = if level == Level::Fast { 1 } else { 19 };
                zstd::bulk::compress(data, level).ok()?
            }
            Encoding::Br => {
                let quality = if level == Level::Fast { 2 } else { 9 };
                // A window no larger than the body (64 KiB at least): the
                // same output, less to set up for a small response.
                let window = (usize::BITS - data.len().leading_zeros()).clamp(16, 22);
                let mut out = out;
                {
                    let mut writer = brotli::CompressorWriter::new(&mut out, 4096, quality, window);
                    writer.write_all(data).ok()?;
                    writer.flush().ok()?;
                }
                out
            }
            Encoding::Gzip => {
                let level = if level == Level::Fast { 1 } else { 9 };
                let mut writer =
                    flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
                writer.write_all(data).ok()?;
                writer.finish().ok()?
            }
        };
        Some(bytes::Bytes::from(compressed))
    }
}

/// The `q` of an `Accept` or `Accept-Encoding` item, from its parameters
/// (1 when absent, 0 when malformed).
pub fn quality<'a>(params: impl Iterator<Item = &'a str>) -> f32 {
    params
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
        .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn pick(accept: &str) -> Option<Encoding> {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(accept).unwrap(),
        );
        Encoding::negotiate(&headers, &Encoding::ALL)
    }

    #[test]
    fn the_best_accepted_coding_wins() {
        assert_eq!(pick("gzip, deflate, br, zstd"), Some(Encoding::Zstd));
        assert_eq!(pick("gzip, deflate, br"), Some(Encoding::Br));
        assert_eq!(pick("gzip"), Some(Encoding::Gzip));
        assert_eq!(pick("br;q=0.5, gzip;q=0.9"), Some(Encoding::Gzip));
        assert_eq!(pick("zstd;q=0, br;q=0"), None);
        assert_eq!(pick("*"), Some(Encoding::Zstd));
        assert_eq!(pick("identity"), None);
        assert_eq!(pick("deflate"), None);
        assert_eq!(Encoding::negotiate(&HeaderMap::new(), &Encoding::ALL), None);
    }

    #[test]
    fn every_codec_round_trips() {
        let data = br#"{"data":{"articles":[{"id":"1","title":"a title"}]}}"#.repeat(50);
        for encoding in Encoding::ALL {
            let packed = encoding.compress(&data, Level::Fast).unwrap();
            assert!(packed.len() < data.len() / 4, "{encoding:?}");
            let unpacked = match encoding {
                Encoding::Zstd => zstd::bulk::decompress(&packed, data.len()).unwrap(),
                Encoding::Br => {
                    let mut out = Vec::new();
                    brotli::BrotliDecompress(&mut &packed[..], &mut out).unwrap();
                    out
                }
                Encoding::Gzip => {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&packed[..]),
                        &mut out,
                    )
                    .unwrap();
                    out
                }
            };
            assert_eq!(unpacked, data, "{encoding:?}");
        }
    }
}
