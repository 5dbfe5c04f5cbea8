//! HPACK decoding (RFC 7541) of request header blocks, handing each field to a callback as
//! borrowed bytes: from the static table, the dynamic table or the block itself, or (Huffman
//! coded) from one scratch buffer the decoder keeps. A request's fields are compared, not kept,
//! so decoding a head allocates only for the entries the client adds to the dynamic table.
//!
//! Written here because the HPACK crates either build owned vectors per field or rebuild their
//! Huffman code table for every string; Huffman strings go through [`super::huffman`].

use std::collections::VecDeque;

/// The dynamic table's size until the client says otherwise, and the most it may say: the port
/// never raises SETTINGS_HEADER_TABLE_SIZE.
pub const TABLE_SIZE: usize = 4096;

/// Why a block could not be decoded; the connection cannot go on (its table may now differ
/// from the client's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HpackError(pub &'static str);

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// One connection's decoding state.
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    scratch: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: TABLE_SIZE,
            scratch: Vec::new(),
        }
    }
}

impl Decoder {
    /// Decodes `block`, calling `field` with each name and value in order.
    pub fn decode(
        &mut self,
        mut block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut fields_seen = false;
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let index = integer(&mut block, 7)?;
                let (name, value) = self.entry(index)?;
                field(name, value);
            } else if first & 0xe0 == 0x20 {
                if fields_seen {
                    return Err(HpackError("a table size update after a field"));
                }
                let size = integer(&mut block, 5)?;
                if size > TABLE_SIZE {
                    return Err(HpackError("a table size over SETTINGS_HEADER_TABLE_SIZE"));
                }
                self.max_size = size;
                self.evict(0);
                continue;
            } else {
                let (indexing, prefix) = if first & 0xc0 == 0x40 {
                    (true, 6)
                } else {
                    (false, 4)
                };
                let index = integer(&mut block, prefix)?;
                let literal_name = if index == 0 {
                    Some(string(&mut block)?)
                } else {
                    None
                };
                let (raw_value, value_huffman) = string(&mut block)?;
                // The scratch buffer holds the value, so a Huffman-coded name gets one of its own.
                let decoded_name = match literal_name {
                    Some((raw, true)) => {
                        self.huffman(raw)?;
                        Some(self.scratch.clone())
                    }
                    _ => None,
                };
                if value_huffman {
                    self.huffman(raw_value)?;
                }
                let value: &[u8] = if value_huffman {
                    &self.scratch
                } else {
                    raw_value
                };
                let name: &[u8] = match (&decoded_name, literal_name) {
                    (Some(decoded), _) => decoded,
                    (None, Some((raw, _))) => raw,
                    (None, None) => self.entry(index)?.0,
                };
                field(name, value);
                if indexing {
                    let entry = (Box::from(name), Box::from(value));
                    self.insert(entry);
                }
            }
            fields_seen = true;
        }
        Ok(())
    }

    fn huffman(&mut self, raw: &[u8]) -> Result<(), HpackError> {
        self.scratch.clear();
        super::huffman::decode(raw, &mut self.scratch)
            .map_err(|_| HpackError("a Huffman string that cannot be decoded"))
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError("index 0")),
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok((name.as_bytes(), value.as_bytes()))
            }
            _ => self
                .table
                .get(index - 62)
                .map(|(name, value)| (&name[..], &value[..]))
                .ok_or(HpackError("an index past the tables")),
        }
    }

    fn insert(&mut self, entry: Entry) {
        let size = entry.0.len() + entry.1.len() + 32;
        if size > self.max_size {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front(entry);
    }

    /// Drops the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((name, value)) = self.table.pop_back() else {
                break;
            };
            self.size -= name.len() + value.len() + 32;
        }
    }
}

/// An integer with an `prefix`-bit prefix (RFC 7541 §5.1), consumed from `block`; at most
/// 2^28, which no index or length here comes near.
fn integer(block: &mut &[u8], prefix: u32) -> Result<usize, HpackError> {
    let truncated = HpackError("a truncated integer");
    let (&first, rest) = block.split_first().ok_or(truncated)?;
    *block = rest;
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let (&byte, rest) = block.split_first().ok_or(truncated)?;
        *block = rest;
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(HpackError("an integer over 2^28"));
        }
    }
}

/// A string literal's raw bytes and whether they are Huffman coded, consumed from `block`.
fn string<'b>(block: &mut &'b [u8]) -> Result<(&'b [u8], bool), HpackError> {
    let huffman = block.first().is_some_and(|first| first & 0x80 != 0);
    let length = integer(block, 7)?;
    if length > block.len() {
        return Err(HpackError("a string past the block"));
    }
    let (raw, rest) = block.split_at(length);
    *block = rest;
    Ok((raw, huffman))
}

/// RFC 7541 Appendix A.
static STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        let digits: String = text.split_whitespace().collect();
        (0..digits.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(decoder: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        decoder
            .decode(block, |n, v| {
                out.push((
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                ))
            })
            .unwrap();
        out
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// RFC 7541 C.3 and C.4: the same three requests, without and with Huffman coding.
    #[test]
    fn the_rfc_request_examples_decode() {
        for blocks in [
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ] {
            let mut decoder = Decoder::default();
            let base = [(":method", "GET"), (":scheme", "http"), (":path", "/")];
            let mut first = base.to_vec();
            first.push((":authority", "www.example.com"));
            assert_eq!(fields(&mut decoder, &hex(blocks[0])), pairs(&first));
            let mut second = first.clone();
            second.push(("cache-control", "no-cache"));
            assert_eq!(fields(&mut decoder, &hex(blocks[1])), pairs(&second));
            let third = [
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ];
            assert_eq!(fields(&mut decoder, &hex(blocks[2])), pairs(&third));
            assert_eq!(decoder.size, 164);
        }
    }

    #[test]
    fn entries_are_evicted_oldest_first_and_the_size_may_shrink() {
        let mut decoder = Decoder::default();
        let mut block = vec![0x20 | 0x1f, 100 - 31];
        // custom-key: custom-value (54 bytes) twice with different values: only one fits.
        block.extend(hex(
            "400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ));
        block.extend(hex(
            "400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 66",
        ));
        block.push(0x80 | 62);
        let decoded = fields(&mut decoder, &block);
        assert_eq!(decoded[2], ("custom-key".into(), "custom-valuf".into()));
        assert_eq!(decoder.table.len(), 1);
        assert!(decoder.decode(&[0x80 | 63], |_, _| {}).is_err());
    }

    #[test]
    fn bad_blocks_are_errors_not_panics() {
        for bad in [
            vec![0x80],
            vec![0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            vec![0x40, 0x05, b'a'],
            vec![0x00, 0x81, 0xff, 0x00],
            vec![0x3f, 0xe1, 0x20],
            vec![0x82, 0x20],
            vec![0xbf, 0x00],
        ] {
            assert!(
                Decoder::default().decode(&bad, |_, _| {}).is_err(),
                "{bad:?}"
            );
        }
    }
}
