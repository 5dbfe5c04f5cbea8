//! HPACK's Huffman code (RFC 7541 Appendix B, as `httlib-huffman` lists it) decoded four bits at
//! a time: an automaton built once whose states are the code tree's inner nodes, two lookups a
//! byte. A string of a dozen bytes costs a few hundred instructions this way, against some ten
//! thousand bit by bit; clients that send a new `grpc-timeout` with every call (tonic's deadlines
//! count down) Huffman-code one on every request.

use std::sync::LazyLock;

/// The code's end-of-string symbol, which must not appear in a string (RFC 7541 §5.2).
const EOS: usize = 256;

/// What one nibble does from one state.
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    next: u8,
    symbol: u8,
    emits: bool,
    fails: bool,
}

struct Automaton {
    steps: Vec<[Step; 16]>,
    /// Whether a string may end in this state: the bits since the last symbol are a prefix of
    /// EOS (all ones) shorter than a byte.
    may_end: Vec<bool>,
}

static AUTOMATON: LazyLock<Automaton> = LazyLock::new(build);

/// A string that is not Huffman code: EOS inside it, or padding that is not a short prefix of
/// EOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidHuffman;

/// Appends the decoded `raw` to `out`.
pub fn decode(raw: &[u8], out: &mut Vec<u8>) -> Result<(), InvalidHuffman> {
    let automaton = &*AUTOMATON;
    let mut state = 0usize;
    for &byte in raw {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = automaton.steps[state][usize::from(nibble)];
            if step.fails {
                return Err(InvalidHuffman);
            }
            if step.emits {
                out.push(step.symbol);
            }
            state = usize::from(step.next);
        }
    }
    if automaton.may_end[state] {
        Ok(())
    } else {
        Err(InvalidHuffman)
    }
}

/// A node of the code tree: inner nodes by index, leaves by symbol.
#[derive(Clone, Copy)]
enum Child {
    Missing,
    Inner(usize),
    Leaf(usize),
}

fn build() -> Automaton {
    // The tree: 256 inner nodes for 257 symbols; node 0 the root.
    let mut children: Vec<[Child; 2]> = vec![[Child::Missing; 2]];
    // Per inner node: its depth, and whether the path to it is all ones.
    let mut ones: Vec<(u32, bool)> = vec![(0, true)];
    for (symbol, &(length, code)) in httlib_huffman::encoder::table::ENCODE_TABLE
        .iter()
        .enumerate()
    {
        let mut node = 0;
        for depth in (0..u32::from(length)).rev() {
            let bit = ((code >> depth) & 1) as usize;
            if depth == 0 {
                children[node][bit] = Child::Leaf(symbol);
                break;
            }
            node = match children[node][bit] {
                Child::Inner(next) => next,
                _ => {
                    let next = children.len();
                    children.push([Child::Missing; 2]);
                    let (parent_depth, parent_ones) = ones[node];
                    ones.push((parent_depth + 1, parent_ones && bit == 1));
                    children[node][bit] = Child::Inner(next);
                    next
                }
            };
        }
    }
    let steps = (0..children.len())
        .map(|start| {
            let mut row = [Step::default(); 16];
            for (nibble, step) in row.iter_mut().enumerate() {
                let mut node = start;
                for shift in (0..4).rev() {
                    match children[node][(nibble >> shift) & 1] {
                        Child::Inner(next) => node = next,
                        Child::Leaf(symbol) if symbol != EOS => {
                            step.symbol = symbol as u8;
                            step.emits = true;
                            node = 0;
                        }
                        Child::Leaf(_) | Child::Missing => step.fails = true,
                    }
                }
                step.next = node as u8;
            }
            row
        })
        .collect();
    let may_end = ones
        .iter()
        .map(|&(depth, all_ones)| all_ones && depth < 8)
        .collect();
    Automaton { steps, may_end }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(text: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        httlib_huffman::encode(text, &mut out).unwrap();
        out
    }

    #[test]
    fn the_tree_has_an_inner_node_per_state() {
        assert_eq!(AUTOMATON.steps.len(), 256);
    }

    #[test]
    fn every_byte_value_decodes_back() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for text in [
            &all[..],
            b"",
            b"www.example.com",
            b"59999989u",
            b"application/grpc",
        ] {
            let mut out = Vec::new();
            decode(&encoded(text), &mut out).unwrap();
            assert_eq!(out, text);
        }
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // "a" is 00011 (5 bits): padded with zeros, or with a whole byte of ones, or EOS.
        assert!(decode(&[0b0001_1111], &mut Vec::new()).is_ok());
        assert!(decode(&[0b0001_1000], &mut Vec::new()).is_err());
        assert!(decode(&[0b0001_1111, 0xff], &mut Vec::new()).is_err());
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()).is_err());
    }
}
