//! The `/json` endpoint's proto3-JSON decoder on arbitrary bytes: a request or an error
//! message, never a panic. A decoded request survives the protobuf round trip and the
//! conversion to the domain request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use ratelimitd::limiter::RequestBounds;
use ratelimitd::proto::rls::RateLimitRequest;
use ratelimitd::service::convert::request_from_proto;
use ratelimitd::service::json::request_from_json;

fuzz_target!(|data: &[u8]| {
    match request_from_json(data) {
        Ok(request) => {
            let bytes = request.encode_to_vec();
            let decoded = RateLimitRequest::decode(bytes.as_slice()).expect("own encoding decodes");
            assert_eq!(decoded, request);
            let _ = request_from_proto(request, &RequestBounds::default());
        }
        Err(message) => assert!(!message.is_empty(), "an error without a message"),
    }
});
