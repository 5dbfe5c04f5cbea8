//! The hot path's RESP codec against a real redis-server: commands it writes are what the redis
//! crate sends, and the replies the server sends back (a pipelined stream of every reply type,
//! arriving in pieces of any size) are delimited and read exactly as the redis crate parses
//! them, script replies included.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, Rate, Unit};
use ratelimitd::store::redis::scripts::keys::redis_key;
use ratelimitd::store::redis::scripts::reply::{decode_call_frame, decode_call_reply};
use ratelimitd::store::redis::scripts::request::{
    evalsha_placed, fcall_placed, script_load, CallCommand, Invocation, KeyPlacement, ScriptCall,
};
use ratelimitd::store::redis::wire::resp::{self, ArrayReader, Element};
use ratelimitd::store::{Check, StoreError};
use redis::Value;
use testkit::redis_server::RedisServer;

/// Sends `commands` (each a list of arguments) in one write and returns the server's replies,
/// each a complete frame as [`resp::frame_len`] delimits them, reading until all have arrived.
fn exchange(server: &RedisServer, commands: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for command in commands {
        let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
        resp::push_args(&mut out, &args);
    }
    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(&out).unwrap();
    let mut received = Vec::new();
    let mut frames = Vec::new();
    let mut chunk = [0u8; 4096];
    while frames.len() < commands.len() {
        let n = stream.read(&mut chunk).expect("the server answers");
        assert!(n > 0, "the server closed the connection");
        received.extend_from_slice(&chunk[..n]);
        while frames.len() < commands.len() {
            match resp::frame_len(&received).expect("well-formed RESP") {
                Some(len) => frames.push(received.drain(..len).collect::<Vec<u8>>()),
                None => break,
            }
        }
    }
    assert!(received.is_empty(), "no byte beyond the last reply");
    frames
}

fn args(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// Whether an element read in place is the value the redis crate parsed.
fn same(element: Element<'_>, value: &Value) -> bool {
    match (element, value) {
        (Element::Int(n), Value::Int(m)) => n == *m,
        (Element::Bulk(bytes), Value::BulkString(parsed)) => bytes == parsed.as_slice(),
        (Element::Simple(b"OK"), Value::Okay) => true,
        (Element::Simple(text), Value::SimpleString(parsed)) => text == parsed.as_bytes(),
        (Element::Error(text), Value::ServerError(error)) => {
            String::from_utf8_lossy(text).starts_with(error.code())
        }
        (Element::Nil, Value::Nil) => true,
        (Element::Array(len), Value::Array(items)) => len == items.len(),
        _ => false,
    }
}

#[test]
fn every_reply_type_of_a_real_server_is_delimited_and_read_as_the_redis_crate_parses_it() {
    let server = RedisServer::start();
    let big = "x".repeat(200_000);
    let commands = vec![
        args(&["PING"]),
        args(&["SET", "text", "hello\r\nworld"]),
        args(&["GET", "text"]),
        args(&["GET", "missing"]),
        args(&["INCRBY", "counter", "-9223372036854775807"]),
        args(&["RPUSH", "list", "a", "", "c"]),
        args(&["LRANGE", "list", "0", "-1"]),
        args(&["LRANGE", "missing", "0", "-1"]),
        args(&["SET", "big", &big]),
        args(&["GET", "big"]),
        args(&["LPUSH", "text", "x"]),
        args(&["EVALSHA", &"0".repeat(40), "0"]),
        args(&["COMMAND", "INFO", "get", "set"]),
        args(&[
            "EVAL",
            "return {1, 'two', {3, {4}}, redis.error_reply('MINE broke'), false, -5}",
            "0",
        ]),
        args(&["BLPOP", "nothing", "0.01"]),
    ];
    let frames = exchange(&server, &commands);

    let mut stream = Vec::new();
    for frame in &frames {
        let value = redis::parse_redis_value(frame).expect("the redis crate parses it");
        match ArrayReader::new(frame).expect("well-formed") {
            Some(mut reader) => {
                let Value::Array(items) = &value else {
                    panic!("an array read in place, {value:?} parsed");
                };
                assert_eq!(reader.len(), items.len());
                for item in items {
                    let element = reader.next_element().unwrap().unwrap();
                    assert!(same(element, item), "{element:?} read, {item:?} parsed");
                }
                assert!(reader.next_element().is_none());
            }
            None => assert!(
                !matches!(value, Value::Array(_)),
                "{value:?} parsed but not read as an array"
            ),
        }
        stream.extend_from_slice(frame);
    }
    assert_eq!(frames[3], b"$-1\r\n");
    assert_eq!(frames[9].len(), big.len() + "$200000\r\n\r\n".len());
    assert!(frames[11].starts_with(b"-NOSCRIPT"));
    assert_eq!(frames[14], b"*-1\r\n");

    // The same stream, arriving in pieces of every size from 1 byte: cut where the frames end.
    for piece in [1, 2, 3, 7, 64, 1000, 70_000] {
        let mut buffered = Vec::new();
        let mut cut = Vec::new();
        for chunk in stream.chunks(piece) {
            buffered.extend_from_slice(chunk);
            while let Some(len) = resp::frame_len(&buffered).unwrap() {
                cut.push(buffered.drain(..len).collect::<Vec<u8>>());
            }
        }
        assert!(cut == frames, "pieces of {piece} bytes");
    }
}

fn check(value: &str, limit: u32, hits: u64, algorithm: Algorithm) -> Check {
    Check {
        key: CounterKey::new(
            "resp",
            &[Entry {
                key: "user".into(),
                value: value.into(),
            }],
        ),
        rate: Rate::new(algorithm, limit, Unit::Minute, 1, None).unwrap(),
        hits,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

#[test]
fn a_script_call_is_the_redis_crate_command_and_its_reply_reads_the_same_in_place() {
    let server = RedisServer::start();
    let mut connection = server.connection();
    let _: String = script_load().query(&mut connection).unwrap();
    let foreign = check("foreign", 5, 1, Algorithm::Gcra);
    let _: () = redis::cmd("HSET")
        .arg(redis_key(&foreign.key, &foreign.rate))
        .arg("f")
        .arg("v")
        .query(&mut connection)
        .unwrap();
    let requests = [
        vec![check("alice", 3, 1, Algorithm::Gcra)],
        vec![
            check("bob", 2, 1, Algorithm::FixedWindow),
            check("bob", 2, 5, Algorithm::FixedWindow),
        ],
        vec![foreign],
        vec![
            check("carol", 10, 0, Algorithm::SlidingWindowCounter),
            check("dave", 1, 1, Algorithm::TokenBucket),
            check("erin", 4, u64::MAX, Algorithm::SlidingWindowLog),
        ],
    ];
    let invocations: Vec<Invocation> = requests
        .iter()
        .enumerate()
        .map(|(i, checks)| Invocation::new(checks, (i % 2 == 0).then_some(1_800_000_000_000_000)))
        .collect();
    let checks = || invocations.iter().map(Invocation::checks);

    for placement in [KeyPlacement::Declared, KeyPlacement::InArguments] {
        for (command, crate_command) in [
            (
                CallCommand::Evalsha,
                evalsha_placed(invocations.iter(), placement),
            ),
            (
                CallCommand::Fcall,
                fcall_placed(invocations.iter(), placement),
            ),
        ] {
            let mut ours = Vec::new();
            ScriptCall::new(invocations.iter(), command, placement).encode(&mut ours);
            assert_eq!(
                ours,
                crate_command.get_packed_command(),
                "{placement:?} {command:?}"
            );
        }
    }

    let mut argv = Vec::new();
    let mut packed = Vec::new();
    ScriptCall::new(
        invocations.iter(),
        CallCommand::Evalsha,
        KeyPlacement::Declared,
    )
    .encode(&mut packed);
    // Split our own encoding back into its arguments to send them through `exchange`.
    let mut reader = ArrayReader::new(&packed).unwrap().unwrap();
    while let Some(element) = reader.next_element() {
        let Element::Bulk(arg) = element.unwrap() else {
            panic!("every argument is a bulk string");
        };
        argv.push(arg.to_vec());
    }
    let frames = exchange(&server, &[argv]);
    let in_place = decode_call_frame(&frames[0], checks()).expect("decodes");
    let parsed = decode_call_reply(redis::parse_redis_value(&frames[0]).unwrap(), checks())
        .expect("decodes");
    assert_eq!(in_place.clock_us, parsed.clock_us);
    assert!(
        in_place.clock_us > 0,
        "an unpinned request reads Redis's clock"
    );
    assert_eq!(in_place.answers, parsed.answers);
    assert!(
        matches!(&in_place.answers[2], Err(StoreError::Protocol(message)) if message.starts_with("WRONGTYPE")),
        "{:?}",
        in_place.answers[2]
    );
    let admitted: Vec<Option<Vec<bool>>> = in_place
        .answers
        .iter()
        .map(|answer| {
            answer
                .as_ref()
                .ok()
                .map(|verdicts| verdicts.iter().map(|v| v.admitted).collect())
        })
        .collect();
    assert_eq!(
        admitted,
        [
            Some(vec![true]),
            Some(vec![true, false]),
            None,
            Some(vec![true, true, false])
        ]
    );
}
