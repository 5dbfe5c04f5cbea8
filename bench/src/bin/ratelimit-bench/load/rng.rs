//! The generator of the key numbers (`{r}` in the descriptor templates).

/// SplitMix64: small, fast, reproducible.
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    /// The generator of one request stream (a closed-loop slot, an open-loop thread): the same
    /// `--seed` gives each stream its own sequence.
    pub(super) fn stream(seed: u64, index: usize) -> SplitMix {
        SplitMix(seed ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-40 for n < 2^24).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}
