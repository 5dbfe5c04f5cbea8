//! Descriptor templates (`--descriptor`, or `KEY=d{i}-{r}` from `--key` and `--descriptors`) and
//! the [`Encoder`] that writes each request from them, gRPC prefix included: byte for byte what
//! prost would encode (field order, defaults omitted), which the tests check.

use bytes::{BufMut, Bytes, BytesMut};

use super::rng::SplitMix;
use super::wire::{field_len, put_varint, GRPC_PREFIX, TAG_1_LEN, TAG_2_LEN, TAG_3_VARINT};
use super::LoadArgs;

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Random,
    Index,
}

#[derive(Debug, Clone)]
struct EntryTemplate {
    key: String,
    value: Vec<Piece>,
}

/// The descriptors of every request; values are filled per request.
#[derive(Debug, Clone)]
pub(super) struct Template {
    descriptors: Vec<Vec<EntryTemplate>>,
}

impl Template {
    pub(super) fn from_args(args: &LoadArgs) -> Result<Template, String> {
        if args.templates.is_empty() {
            let default = format!("{}=d{{i}}-{{r}}", args.key);
            Template::parse((0..args.descriptors).map(|_| default.as_str()))
        } else {
            Template::parse(args.templates.iter().map(String::as_str))
        }
    }

    /// One descriptor per template text.
    pub(super) fn parse<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Template, String> {
        let descriptors = texts
            .into_iter()
            .map(parse_descriptor)
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Template { descriptors })
    }
}

fn parse_descriptor(text: &str) -> Result<Vec<EntryTemplate>, String> {
    text.split(',')
        .map(|entry| {
            let (key, value) = entry.split_once('=').ok_or_else(|| {
                format!("descriptor template `{text}`: `{entry}` is not key=value")
            })?;
            if key.is_empty() {
                return Err(format!("descriptor template `{text}`: empty key"));
            }
            Ok(EntryTemplate {
                key: key.to_owned(),
                value: parse_value(value),
            })
        })
        .collect()
}

fn parse_value(mut value: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    while !value.is_empty() {
        let (next, piece, len) = [("{r}", Piece::Random), ("{i}", Piece::Index)]
            .into_iter()
            .filter_map(|(marker, piece)| value.find(marker).map(|at| (at, piece, marker.len())))
            .min_by_key(|(at, _, _)| *at)
            .unwrap_or((value.len(), Piece::Text(String::new()), 0));
        if next > 0 {
            pieces.push(Piece::Text(value[..next].to_owned()));
        }
        if len > 0 {
            pieces.push(piece);
        }
        value = &value[next + len..];
    }
    pieces
}

fn decimal_len(value: u64) -> usize {
    value
        .checked_ilog10()
        .map_or(1, |digits| digits as usize + 1)
}

fn put_decimal(buf: &mut BytesMut, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    buf.put_slice(&digits[at..]);
}

/// One entry of a descriptor template, ready to encode.
#[derive(Debug)]
struct EntryCode {
    /// The `key` field, encoded once.
    key: Vec<u8>,
    value: Vec<Piece>,
}

impl EntryCode {
    fn value_len(&self, index: u64, random: u64) -> usize {
        self.value
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.len(),
                Piece::Random => decimal_len(random),
                Piece::Index => decimal_len(index),
            })
            .sum()
    }

    /// The `Entry` message's size (without its own tag and length).
    fn len(&self, value_len: usize) -> usize {
        // An empty value is the default: omitted, as prost does.
        self.key.len()
            + if value_len > 0 {
                field_len(value_len)
            } else {
                0
            }
    }

    fn encode(&self, index: u64, random: u64, buf: &mut BytesMut) {
        let value_len = self.value_len(index, random);
        buf.put_u8(TAG_1_LEN);
        put_varint(buf, self.len(value_len) as u64);
        buf.put_slice(&self.key);
        if value_len == 0 {
            return;
        }
        buf.put_u8(TAG_2_LEN);
        put_varint(buf, value_len as u64);
        for piece in &self.value {
            match piece {
                Piece::Text(text) => buf.put_slice(text.as_bytes()),
                Piece::Random => put_decimal(buf, random),
                Piece::Index => put_decimal(buf, index),
            }
        }
    }
}

/// Writes each request, gRPC prefix included, straight from the templates: the constant parts
/// (domain, entry keys, hits_addend) are encoded once; per request only the values' numbers are
/// drawn and printed.
#[derive(Debug)]
pub(super) struct Encoder {
    /// The `domain` field, encoded once (empty for an empty domain).
    domain: Vec<u8>,
    descriptors: Vec<Vec<EntryCode>>,
    /// The `hits_addend` field, encoded once (empty when 0).
    hits_addend: Vec<u8>,
    keys: u64,
    /// An upper bound of one encoded request, prefix included.
    max_len: usize,
}

impl Encoder {
    pub(super) fn new(template: &Template, domain: &str, hits_addend: u32, keys: u64) -> Encoder {
        let mut field = BytesMut::new();
        if !domain.is_empty() {
            field.put_u8(TAG_1_LEN);
            put_varint(&mut field, domain.len() as u64);
            field.put_slice(domain.as_bytes());
        }
        let domain = field.split().to_vec();
        if hits_addend != 0 {
            field.put_u8(TAG_3_VARINT);
            put_varint(&mut field, u64::from(hits_addend));
        }
        let hits_addend = field.split().to_vec();
        let descriptors: Vec<Vec<EntryCode>> = template
            .descriptors
            .iter()
            .map(|entries| {
                entries
                    .iter()
                    .map(|entry| {
                        field.put_u8(TAG_1_LEN);
                        put_varint(&mut field, entry.key.len() as u64);
                        field.put_slice(entry.key.as_bytes());
                        EntryCode {
                            key: field.split().to_vec(),
                            value: entry.value.clone(),
                        }
                    })
                    .collect()
            })
            .collect();
        // Each number at most 20 digits, each length at most 10 bytes.
        let max_len = GRPC_PREFIX
            + domain.len()
            + hits_addend.len()
            + descriptors
                .iter()
                .map(|entries| {
                    11 + entries
                        .iter()
                        .map(|entry| {
                            let value: usize = entry
                                .value
                                .iter()
                                .map(|piece| match piece {
                                    Piece::Text(text) => text.len(),
                                    Piece::Random | Piece::Index => 20,
                                })
                                .sum();
                            11 + entry.key.len() + 11 + value
                        })
                        .sum::<usize>()
                })
                .sum::<usize>();
        Encoder {
            domain,
            descriptors,
            hits_addend,
            keys,
            max_len,
        }
    }

    /// Encodes the next request: a random key number per descriptor (`{r}`, uniform in
    /// 0..keys), drawn in descriptor order. `buf` is a scratch buffer kept by the caller: the
    /// request is split off it, so the same memory serves again once the connection has
    /// written the requests split off before (no allocation per request).
    pub(super) fn encode(&self, rng: &mut SplitMix, buf: &mut BytesMut) -> Bytes {
        buf.clear();
        buf.reserve(self.max_len);
        buf.put_slice(&[0; GRPC_PREFIX]);
        buf.put_slice(&self.domain);
        for (index, entries) in self.descriptors.iter().enumerate() {
            let index = index as u64;
            let random = if self.keys <= 1 {
                0
            } else {
                rng.below(self.keys)
            };
            let len: usize = entries
                .iter()
                .map(|entry| field_len(entry.len(entry.value_len(index, random))))
                .sum();
            buf.put_u8(TAG_2_LEN);
            put_varint(buf, len as u64);
            for entry in entries {
                entry.encode(index, random, buf);
            }
        }
        buf.put_slice(&self.hits_addend);
        // Requests are far below 4 GiB (max_len bounds them).
        let len = (buf.len() - GRPC_PREFIX) as u32;
        buf[1..GRPC_PREFIX].copy_from_slice(&len.to_be_bytes());
        buf.split().freeze()
    }

    pub(super) fn descriptor_count(&self) -> usize {
        self.descriptors.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::wire::unframe;
    use prost::Message as _;
    use ratelimitd::proto::common::{rate_limit_descriptor::Entry, RateLimitDescriptor};
    use ratelimitd::proto::rls::RateLimitRequest;

    fn encoder(templates: &[&str], domain: &str, hits_addend: u32, keys: u64) -> Encoder {
        let template = Template::parse(templates.iter().copied()).unwrap();
        Encoder::new(&template, domain, hits_addend, keys)
    }

    /// Encodes one request and returns it decoded by prost, checking the gRPC prefix and that
    /// the bytes are exactly prost's own encoding of it.
    fn encode_and_decode(encoder: &Encoder, rng: &mut SplitMix) -> RateLimitRequest {
        let mut buf = BytesMut::new();
        let framed = encoder.encode(rng, &mut buf);
        assert!(framed.len() <= encoder.max_len);
        let message = unframe(&framed).unwrap();
        let request = RateLimitRequest::decode(message).unwrap();
        assert_eq!(request.encode_to_vec(), message, "not prost's encoding");
        request
    }

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn templates_expand_placeholders() {
        let encoder = encoder(&["a=x{r}y{i},b=plain", "c={i}"], "d", 0, 1);
        let request = encode_and_decode(&encoder, &mut SplitMix(1));
        assert_eq!(request.domain, "d");
        assert_eq!(request.hits_addend, 0);
        assert_eq!(
            request.descriptors,
            vec![
                RateLimitDescriptor {
                    entries: vec![entry("a", "x0y0"), entry("b", "plain")],
                    ..RateLimitDescriptor::default()
                },
                RateLimitDescriptor {
                    entries: vec![entry("c", "1")],
                    ..RateLimitDescriptor::default()
                },
            ]
        );
        assert!(parse_descriptor("novalue").is_err());
        assert!(parse_descriptor("=v").is_err());
    }

    #[test]
    fn random_keys_follow_the_generator_in_descriptor_order() {
        let keys = 100_000;
        let encoder = encoder(&["gcra=d{i}-{r}"; 3], "bench", 7, keys);
        let mut rng = SplitMix(42);
        let mut expected = SplitMix(42);
        for _ in 0..1000 {
            let request = encode_and_decode(&encoder, &mut rng);
            assert_eq!(request.domain, "bench");
            assert_eq!(request.hits_addend, 7);
            for (index, descriptor) in request.descriptors.iter().enumerate() {
                let value = format!("d{index}-{}", expected.below(keys));
                assert_eq!(descriptor.entries, vec![entry("gcra", &value)]);
            }
        }
    }

    #[test]
    fn long_and_empty_fields_are_encoded_like_prost() {
        let long = "v".repeat(300);
        let template = format!("k={long}{{r}},e=,{}={{i}}", "K".repeat(200));
        let encoder = encoder(&[template.as_str()], "", 0, u64::MAX);
        let mut rng = SplitMix(3);
        for _ in 0..100 {
            let request = encode_and_decode(&encoder, &mut rng);
            assert_eq!(request.domain, "");
            let entries = &request.descriptors[0].entries;
            assert!(entries[0].value.starts_with(&long));
            assert_eq!(entries[1], entry("e", ""));
            assert_eq!(entries[2].value, "0");
        }
    }

    #[test]
    fn decimals() {
        for value in [
            0,
            1,
            9,
            10,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut buf = BytesMut::new();
            put_decimal(&mut buf, value);
            assert_eq!(&buf[..], value.to_string().as_bytes());
            assert_eq!(decimal_len(value), buf.len());
        }
    }
}
