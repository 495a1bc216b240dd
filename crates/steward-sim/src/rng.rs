//! The simulator's only source of choice: a seeded PRNG (SplitMix64), owned here so that a seed
//! means the same run on every platform and every version of every dependency.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to choose interleavings.
pub(crate) struct Prng(u64);

impl Prng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no answer");
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub(crate) fn between(&mut self, lo: i64, hi: i64) -> i64 {
        assert!(lo <= hi, "between({lo}, {hi}) is empty");
        lo + self.below((hi - lo) as u64 + 1) as i64
    }

    /// True with probability `percent` / 100.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An index into `weights`, chosen in proportion to them.
    pub(crate) fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut pick = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                return i;
            }
            pick -= w;
        }
        unreachable!("pick < total")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_sequence() {
        let a: Vec<u64> = {
            let mut r = Prng::new(7);
            (0..5).map(|_| r.next_u64()).collect()
        };
        let mut r = Prng::new(7);
        assert_eq!(a, (0..5).map(|_| r.next_u64()).collect::<Vec<_>>());
        // SplitMix64's published first output for seed 0.
        assert_eq!(Prng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }
}
