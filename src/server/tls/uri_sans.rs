//! The URIs among a certificate's Subject Alternative Names.
//!
//! webpki checks DNS names and IP addresses but has no API for URI names (SPIFFE IDs and the
//! like), so this walks the DER itself: Certificate -> tbsCertificate -> extensions [3] ->
//! subjectAltName (2.5.29.17) -> GeneralNames -> uniformResourceIdentifier [6]. It reads only
//! certificates webpki has already verified, and returns nothing for anything it cannot follow.

/// DER of the subjectAltName extension's OID, 2.5.29.17.
const SUBJECT_ALT_NAME_OID: &[u8] = &[0x55, 0x1d, 0x11];

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
/// `[3] EXPLICIT Extensions` in a tbsCertificate.
const EXTENSIONS: u8 = 0xa3;
/// `[6] IMPLICIT IA5String` in GeneralName.
const URI_NAME: u8 = 0x86;

/// The URI names of `certificate` (DER), in their order; empty when it has none or its DER
/// cannot be followed.
pub fn uri_sans(certificate: &[u8]) -> Vec<&str> {
    subject_alt_names(certificate)
        .map(|names| {
            Elements(names)
                .filter(|(tag, _)| *tag == URI_NAME)
                .filter_map(|(_, value)| std::str::from_utf8(value).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The contents of the GeneralNames SEQUENCE of the subjectAltName extension.
fn subject_alt_names(certificate: &[u8]) -> Option<&[u8]> {
    let certificate = single(certificate, SEQUENCE)?;
    let (tag, tbs) = Elements(certificate).next()?;
    if tag != SEQUENCE {
        return None;
    }
    let (_, extensions) = Elements(tbs).find(|(tag, _)| *tag == EXTENSIONS)?;
    let extensions = single(extensions, SEQUENCE)?;
    Elements(extensions)
        .filter(|(tag, _)| *tag == SEQUENCE)
        .find_map(|(_, extension)| {
            let mut fields = Elements(extension);
            let (tag, oid) = fields.next()?;
            if tag != OID || oid != SUBJECT_ALT_NAME_OID {
                return None;
            }
            let (mut tag, mut value) = fields.next()?;
            if tag == BOOLEAN {
                (tag, value) = fields.next()?;
            }
            if tag != OCTET_STRING {
                return None;
            }
            single(value, SEQUENCE)
        })
}

/// The contents of `der` when it is exactly one element with tag `tag`.
fn single(der: &[u8], tag: u8) -> Option<&[u8]> {
    let (found, contents, rest) = element(der)?;
    (found == tag && rest.is_empty()).then_some(contents)
}

/// The DER elements one after another at one level: (tag, contents). Stops at the first
/// malformed one.
struct Elements<'a>(&'a [u8]);

impl<'a> Iterator for Elements<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (tag, contents, rest) = element(self.0)?;
        self.0 = rest;
        Some((tag, contents))
    }
}

/// The first element of `der`: its one-byte tag, its contents and what follows. DER lengths
/// are definite, in at most four bytes.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let length = if first < 0x80 {
        usize::from(first)
    } else {
        let bytes = usize::from(first & 0x7f);
        if bytes == 0 || bytes > 4 || rest.len() < bytes {
            return None;
        }
        let (length, after) = rest.split_at(bytes);
        rest = after;
        length
            .iter()
            .fold(0usize, |value, &byte| (value << 8) | usize::from(byte))
    };
    if rest.len() < length {
        return None;
    }
    let (contents, rest) = rest.split_at(length);
    Some((tag, contents, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of `tag` around `contents`.
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(contents);
        out
    }

    fn certificate(extensions: &[Vec<u8>]) -> Vec<u8> {
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[7]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(EXTENSIONS, &tlv(SEQUENCE, &extensions.concat())),
        ]
        .concat();
        tlv(
            SEQUENCE,
            &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[]), tlv(0x03, &[0])].concat(),
        )
    }

    fn san_extension(critical: bool, names: &[Vec<u8>]) -> Vec<u8> {
        let mut fields = tlv(OID, SUBJECT_ALT_NAME_OID);
        if critical {
            fields.extend(tlv(BOOLEAN, &[0xff]));
        }
        fields.extend(tlv(OCTET_STRING, &tlv(SEQUENCE, &names.concat())));
        tlv(SEQUENCE, &fields)
    }

    #[test]
    fn uris_are_found_among_other_names_and_extensions() {
        let basic_constraints = tlv(
            SEQUENCE,
            &[tlv(OID, &[0x55, 0x1d, 0x13]), tlv(OCTET_STRING, &[0x30, 0])].concat(),
        );
        let long_uri = format!("spiffe://example.org/{}", "a".repeat(300));
        let names = [
            tlv(0x82, b"envoy.example.org"),
            tlv(URI_NAME, b"spiffe://example.org/envoy"),
            tlv(0x87, &[127, 0, 0, 1]),
            tlv(URI_NAME, long_uri.as_bytes()),
        ];
        for critical in [false, true] {
            let der = certificate(&[basic_constraints.clone(), san_extension(critical, &names)]);
            assert_eq!(
                uri_sans(&der),
                ["spiffe://example.org/envoy", long_uri.as_str()]
            );
        }
    }

    #[test]
    fn no_san_extension_or_broken_der_gives_nothing() {
        assert!(uri_sans(&certificate(&[])).is_empty());
        let der = certificate(&[san_extension(false, &[tlv(URI_NAME, b"spiffe://x/y")])]);
        for cut in 0..der.len() {
            assert!(uri_sans(&der[..cut]).is_empty(), "cut at {cut}");
        }
        assert!(
            uri_sans(&[0x30, 0x80, 0, 0]).is_empty(),
            "indefinite length"
        );
        assert!(
            uri_sans(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_empty(),
            "5-byte length"
        );
    }
}
