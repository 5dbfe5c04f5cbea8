//! The protobuf and gRPC wire format, by hand: varints, the gRPC message prefix, and the walk of
//! a response for the two fields the counts need. Requests are written by
//! [`super::template::Encoder`], field by field as prost would encode them.

use bytes::{BufMut, BytesMut};

/// `RateLimitRequest.domain` (1), `.descriptors` (2), `RateLimitDescriptor.entries` (1),
/// `Entry.key` (1) and `Entry.value` (2): length-delimited fields.
pub(super) const TAG_1_LEN: u8 = 1 << 3 | 2;
pub(super) const TAG_2_LEN: u8 = 2 << 3 | 2;
/// `RateLimitRequest.hits_addend` (3): varint.
pub(super) const TAG_3_VARINT: u8 = 3 << 3;
/// The gRPC message prefix: compressed flag (1 byte), message length (4 bytes, big endian).
pub(super) const GRPC_PREFIX: usize = 5;

fn varint_len(value: u64) -> usize {
    // 7 bits per byte; 0 still takes one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

pub(super) fn put_varint(buf: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

/// A length-delimited field's size on the wire: tag, length, content.
pub(super) fn field_len(content: usize) -> usize {
    1 + varint_len(content as u64) + content
}

/// The single message of a unary response body: uncompressed (none was negotiated) and exactly
/// as long as its prefix says.
pub(super) fn unframe(body: &[u8]) -> Result<&[u8], &'static str> {
    let Some((prefix, message)) = body.split_first_chunk::<GRPC_PREFIX>() else {
        return Err(if body.is_empty() {
            "no response message"
        } else {
            "truncated gRPC message prefix"
        });
    };
    if prefix[0] != 0 {
        return Err("compressed response (no compression was negotiated)");
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    match message.len().cmp(&len) {
        std::cmp::Ordering::Equal => Ok(message),
        std::cmp::Ordering::Less => Err("truncated response message"),
        std::cmp::Ordering::Greater => Err("more than one response message"),
    }
}

fn read_varint(input: &mut &[u8]) -> Result<u64, &'static str> {
    let mut value = 0u64;
    for (at, &byte) in input.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * at);
        if byte < 0x80 {
            *input = &input[at + 1..];
            return Ok(value);
        }
    }
    Err("bad varint")
}

fn skip(input: &mut &[u8], len: u64) -> Result<(), &'static str> {
    let len = usize::try_from(len).map_err(|_| "field too long")?;
    *input = input.get(len..).ok_or("truncated field")?;
    Ok(())
}

/// What the counts need of a `RateLimitResponse`: `overall_code` (field 1) and how many
/// `statuses` (field 2) it has. Every other field is skipped by its wire type, unparsed.
pub(super) fn decode_response(mut message: &[u8]) -> Result<Answer, &'static str> {
    let mut answer = Answer {
        overall_code: 0,
        statuses: 0,
    };
    while !message.is_empty() {
        let key = read_varint(&mut message)?;
        let (field, wire_type) = (key >> 3, key & 7);
        match (field, wire_type) {
            (0, _) => return Err("field number 0"),
            // An enum is an int32: the low 32 bits, as prost reads it; the last one wins.
            (1, 0) => answer.overall_code = read_varint(&mut message)? as i32,
            (1, _) => return Err("overall_code is not a varint"),
            (2, 2) => {
                let len = read_varint(&mut message)?;
                skip(&mut message, len)?;
                answer.statuses += 1;
            }
            (2, _) => return Err("statuses is not length-delimited"),
            (_, 0) => {
                read_varint(&mut message)?;
            }
            (_, 1) => skip(&mut message, 8)?,
            (_, 2) => {
                let len = read_varint(&mut message)?;
                skip(&mut message, len)?;
            }
            (_, 5) => skip(&mut message, 4)?,
            _ => return Err("unsupported wire type"),
        }
    }
    Ok(answer)
}

/// The part of a response the counts need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) overall_code: i32,
    pub(super) statuses: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus};
    use ratelimitd::proto::rls::RateLimitResponse;

    #[test]
    fn varints() {
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
            put_varint(&mut buf, value);
            assert_eq!(buf.len(), varint_len(value), "{value}");
            let mut input = &buf[..];
            assert_eq!(read_varint(&mut input), Ok(value));
            assert!(input.is_empty());
        }
    }

    #[test]
    fn responses_yield_overall_code_and_status_count() {
        let status = |code: Code| DescriptorStatus {
            code: code as i32,
            limit_remaining: 12,
            ..DescriptorStatus::default()
        };
        let cases = [
            (Code::Ok, vec![status(Code::Ok)]),
            (
                Code::OverLimit,
                vec![status(Code::Ok), status(Code::OverLimit)],
            ),
            (Code::Unknown, vec![]),
        ];
        for (code, statuses) in cases {
            let response = RateLimitResponse {
                overall_code: code as i32,
                statuses: statuses.clone(),
                raw_body: vec![1, 2, 3],
                ..RateLimitResponse::default()
            };
            let mut framed = vec![0, 0, 0, 0, 0];
            response.encode(&mut framed).unwrap();
            let len = (framed.len() - 5) as u32;
            framed[1..5].copy_from_slice(&len.to_be_bytes());
            let answer = decode_response(unframe(&framed).unwrap()).unwrap();
            assert_eq!(answer.overall_code, code as i32);
            assert_eq!(answer.statuses, statuses.len());
            // Cut anywhere, the frame or the message is refused.
            for cut in 0..framed.len() {
                assert!(unframe(&framed[..cut]).is_err(), "cut at {cut}");
            }
            let message = &framed[5..];
            if message.len() > 2 {
                assert!(decode_response(&message[..message.len() - 1]).is_err());
            }
        }
        assert_eq!(
            unframe(&[1, 0, 0, 0, 0]),
            Err("compressed response (no compression was negotiated)")
        );
        assert_eq!(
            unframe(&[0, 0, 0, 0, 0, 0]),
            Err("more than one response message")
        );
        // Out-of-range codes still decode; the tally counts them as UNKNOWN.
        assert_eq!(decode_response(&[8, 7]).map(|a| a.overall_code), Ok(7));
        assert!(decode_response(&[0x0a, 0]).is_err()); // overall_code with the wrong wire type
    }
}
