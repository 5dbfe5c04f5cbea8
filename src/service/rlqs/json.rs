//! `GET /rlqs`: the current RLQS assignments as JSON, per bucket and stream, a page at a time.

use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use serde_json::{json, Map, Value};

use super::bucket_key::BucketKey;
use super::convert::Assignment;
use super::registry::{BucketView, QuotaRegistry};
use crate::limiter::quota::{BlanketRule, BucketId, QuotaStrategy};
use crate::store::QuotaDemands;

fn blanket(rule: BlanketRule) -> &'static str {
    match rule {
        BlanketRule::AllowAll => "ALLOW_ALL",
        BlanketRule::DenyAll => "DENY_ALL",
    }
}

fn assignment(assignment: &Assignment) -> Value {
    match assignment {
        Assignment::Blanket(rule) => json!({"blanket_rule": blanket(*rule)}),
        Assignment::TokenBucket(bucket) => json!({"token_bucket": {
            "max_tokens": bucket.max_tokens,
            "tokens_per_fill": bucket.tokens_per_fill,
            "fill_interval": format!("{}s", bucket.fill_interval.as_secs()),
        }}),
    }
}

/// One bucket of `/rlqs`: `{"domain", "bucket": {key: value}, "rule", "limit_per_second" |
/// "blanket_rule", "streams": [{"stream", "demand", "share", "assignment"}]}`; a demand is
/// `null` until a report covered time, a share `null` for a blanket rule, an assignment `null`
/// until sent.
pub fn bucket(view: &BucketView) -> Value {
    let mut bucket = Map::new();
    bucket.insert("domain".into(), json!(view.key.domain));
    let entries: Map<String, Value> = view
        .key
        .bucket
        .entries()
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    bucket.insert("bucket".into(), Value::Object(entries));
    bucket.insert("rule".into(), json!(view.rule));
    match view.strategy {
        QuotaStrategy::Blanket(rule) => {
            bucket.insert("blanket_rule".into(), json!(blanket(rule)));
        }
        QuotaStrategy::Limited(rate) => {
            bucket.insert("limit_per_second".into(), json!(rate.per_second()));
        }
    }
    let streams: Vec<Value> = view
        .streams
        .iter()
        .map(|member| {
            json!({
                "stream": member.stream,
                "demand": member.demand,
                "share": member.share,
                "assignment": member.assignment.as_ref().map(assignment),
            })
        })
        .collect();
    bucket.insert("streams".into(), Value::Array(streams));
    Value::Object(bucket)
}

/// What `/rlqs` reads: the buckets a range at a time.
pub trait Pages: Send + Sync {
    /// The buckets after `after` (from the first when `None`) in domain and bucket order, as
    /// many as hold at most `members` streams in all, and at least one.
    fn page(&self, after: Option<&BucketKey>, members: usize) -> Vec<BucketView>;
    /// Open RLQS streams.
    fn streams(&self) -> usize;
    /// Buckets subscribed by at least one stream.
    fn buckets(&self) -> usize;
}

impl<D: QuotaDemands> Pages for QuotaRegistry<D> {
    fn page(&self, after: Option<&BucketKey>, members: usize) -> Vec<BucketView> {
        QuotaRegistry::page(self, after, members)
    }

    fn streams(&self) -> usize {
        QuotaRegistry::streams(self)
    }

    fn buckets(&self) -> usize {
        QuotaRegistry::buckets(self)
    }
}

/// Streams read from the registry at a time while `/rlqs` is written: the registry is held for
/// that many only, and the text of that many is what is built before it is sent.
const CHUNK_MEMBERS: usize = 256;

/// Where the writing of a page stands.
enum Step {
    Open {
        after: Option<BucketKey>,
        left: usize,
    },
    Buckets {
        after: Option<BucketKey>,
        left: usize,
        first: bool,
    },
    Done,
}

/// A page of `/rlqs`, written as it is read: `{"buckets": [...], "next": CURSOR | null}` with
/// the buckets after `after` whose streams number at most `limit` (at least one bucket), and
/// the cursor of the next page when this one is full. The buckets are read and their text built
/// [`CHUNK_MEMBERS`] streams at a time on a blocking thread, each chunk when the client has
/// taken the previous one: nothing is built ahead of a slow client, the serving threads only
/// pass the bytes on, and the registry is held for one chunk at a time (so the page is not one
/// instant's snapshot).
pub fn page(
    pages: Arc<dyn Pages>,
    after: Option<BucketKey>,
    limit: usize,
) -> impl Stream<Item = Bytes> + Send {
    let start = Step::Open { after, left: limit };
    futures::stream::unfold((start, pages), |(step, pages)| async move {
        match step {
            Step::Open { after, left } => Some((
                Bytes::from_static(b"{\"buckets\":["),
                (
                    Step::Buckets {
                        after,
                        left,
                        first: true,
                    },
                    pages,
                ),
            )),
            Step::Buckets { after, left: 0, .. } => {
                Some((end_of_page(after.as_ref()), (Step::Done, pages)))
            }
            Step::Buckets {
                after,
                mut left,
                mut first,
            } => {
                let reader = pages.clone();
                let chunk = tokio::task::spawn_blocking(move || {
                    let views = reader.page(after.as_ref(), left.min(CHUNK_MEMBERS));
                    if views.is_empty() {
                        return None;
                    }
                    let mut text = String::new();
                    let mut last = None;
                    for view in views {
                        // Only a page's first bucket may hold more streams than are left.
                        if !first && view.streams.len() > left {
                            left = 0;
                            break;
                        }
                        if !first {
                            text.push(',');
                        }
                        first = false;
                        text.push_str(&bucket(&view).to_string());
                        left = left.saturating_sub(view.streams.len());
                        last = Some(view.key);
                    }
                    Some((text, last.or(after), left, first))
                })
                .await;
                match chunk {
                    Ok(Some((text, after, _, _))) if text.is_empty() => {
                        Some((end_of_page(after.as_ref()), (Step::Done, pages)))
                    }
                    Ok(Some((text, after, left, first))) => Some((
                        Bytes::from(text),
                        (Step::Buckets { after, left, first }, pages),
                    )),
                    Ok(None) => Some((
                        Bytes::from_static(b"],\"next\":null}\n"),
                        (Step::Done, pages),
                    )),
                    Err(_) => None,
                }
            }
            Step::Done => None,
        }
    })
}

/// The end of a full page: the cursor of the next one, after `last`.
fn end_of_page(last: Option<&BucketKey>) -> Bytes {
    Bytes::from(format!("],\"next\":{}}}\n", json!(last.map(cursor))))
}

/// The cursor of the page after `key`: its domain and entries, each length-prefixed, in hex (so
/// that it needs no escaping in a URL).
pub fn cursor(key: &BucketKey) -> String {
    let mut bytes = Vec::new();
    let mut put = |text: &str| {
        bytes.extend_from_slice(&(text.len() as u32).to_be_bytes());
        bytes.extend_from_slice(text.as_bytes());
    };
    put(&key.domain);
    for (name, value) in key.bucket.entries() {
        put(name);
        put(value);
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The bucket a [`cursor`] names.
pub fn parse_cursor(text: &str) -> Result<BucketKey, String> {
    let bad = || format!("`after` is not a cursor of /rlqs: {text:.64}");
    if text.len() % 2 != 0 {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2).unwrap_or("x"), 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let mut rest = bytes.as_slice();
    let mut strings = Vec::new();
    while !rest.is_empty() {
        let (length, tail) = rest.split_at_checked(4).ok_or_else(bad)?;
        let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]) as usize;
        let (string, tail) = tail.split_at_checked(length).ok_or_else(bad)?;
        strings.push(String::from_utf8(string.to_vec()).map_err(|_| bad())?);
        rest = tail;
    }
    let mut strings = strings.into_iter();
    let domain = strings.next().ok_or_else(bad)?;
    let entries: Vec<(String, String)> = {
        let rest: Vec<String> = strings.collect();
        if rest.len() % 2 != 0 {
            return Err(bad());
        }
        rest.chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect()
    };
    let bucket = BucketId::new(entries).map_err(|_| bad())?;
    Ok(BucketKey { domain, bucket })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::limiter::quota::BlanketRule;
    use crate::service::rlqs::registry::MemberView;

    fn key(domain: &str, value: &str) -> BucketKey {
        BucketKey {
            domain: domain.into(),
            bucket: BucketId::new([("name", value), ("path", "/a\u{0}b")]).expect("an id"),
        }
    }

    /// Buckets `b000`.. of `streams` streams each.
    struct Fixed {
        buckets: Vec<BucketView>,
    }

    impl Fixed {
        fn new(buckets: usize, streams: usize) -> Fixed {
            let view = |i: usize| BucketView {
                key: key("d", &format!("b{i:03}")),
                rule: "d.name".into(),
                strategy: QuotaStrategy::Blanket(BlanketRule::AllowAll),
                streams: (0..streams as u64)
                    .map(|stream| MemberView {
                        stream,
                        demand: None,
                        share: None,
                        assignment: None,
                    })
                    .collect(),
            };
            Fixed {
                buckets: (0..buckets).map(view).collect(),
            }
        }
    }

    impl Pages for Fixed {
        fn page(&self, after: Option<&BucketKey>, members: usize) -> Vec<BucketView> {
            let mut taken = 0;
            let mut views = Vec::new();
            for view in self
                .buckets
                .iter()
                .filter(|v| after.is_none_or(|a| &v.key > a))
            {
                if !views.is_empty() && taken + view.streams.len() > members {
                    break;
                }
                taken += view.streams.len();
                views.push(view.clone());
            }
            views
        }

        fn streams(&self) -> usize {
            self.buckets.iter().map(|view| view.streams.len()).sum()
        }

        fn buckets(&self) -> usize {
            self.buckets.len()
        }
    }

    async fn read(pages: &Arc<dyn Pages>, after: Option<BucketKey>, limit: usize) -> Value {
        let chunks: Vec<Bytes> = page(pages.clone(), after, limit).collect().await;
        let text: Vec<u8> = chunks.concat();
        serde_json::from_slice(&text).expect("JSON")
    }

    #[test]
    fn a_cursor_names_its_bucket_and_nothing_else_parses() {
        let bucket = key("édge", "a=b&c");
        let text = cursor(&bucket);
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        assert_eq!(parse_cursor(&text), Ok(bucket));
        for bad in [
            "",
            "0",
            "zz",
            "00000005",
            "0000000164",
            &text[..text.len() - 2],
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn pages_follow_each_other_to_the_end_in_chunks() {
        let pages: Arc<dyn Pages> = Arc::new(Fixed::new(700, 3));
        let mut seen = Vec::new();
        let mut after = None;
        let mut reads = 0;
        loop {
            let document = read(&pages, after, 1000).await;
            reads += 1;
            let buckets = document["buckets"].as_array().expect("buckets");
            assert!(buckets.len() <= 334, "{} buckets", buckets.len());
            seen.extend(buckets.iter().map(|b| b["bucket"]["name"].clone()));
            match document["next"].as_str() {
                Some(next) => after = Some(parse_cursor(next).expect("a cursor")),
                None => break,
            }
        }
        assert_eq!(reads, 3);
        let wanted: Vec<Value> = (0..700).map(|i| json!(format!("b{i:03}"))).collect();
        assert_eq!(seen, wanted);
    }

    #[tokio::test]
    async fn a_page_never_holds_more_streams_than_its_limit_after_its_first_bucket() {
        // Chunks of 256 streams: two buckets of 100, then the third does not fit the 250 asked.
        let pages: Arc<dyn Pages> = Arc::new(Fixed::new(5, 100));
        let document = read(&pages, None, 250).await;
        assert_eq!(document["buckets"].as_array().map(Vec::len), Some(2));
        let next = document["next"].as_str().expect("a next page");
        let rest = read(&pages, Some(parse_cursor(next).expect("a cursor")), 250).await;
        assert_eq!(rest["buckets"][0]["bucket"]["name"], "b002");
    }

    #[tokio::test]
    async fn a_bucket_of_more_streams_than_the_limit_is_a_page_of_its_own() {
        let pages: Arc<dyn Pages> = Arc::new(Fixed::new(2, 5));
        let document = read(&pages, None, 3).await;
        assert_eq!(document["buckets"].as_array().map(Vec::len), Some(1));
        assert!(document["next"].is_string());
        let empty: Arc<dyn Pages> = Arc::new(Fixed::new(0, 1));
        assert_eq!(
            read(&empty, None, 10).await,
            json!({"buckets": [], "next": null})
        );
    }
}
