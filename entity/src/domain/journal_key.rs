//! The idempotency keys of journal rows that are read back by their key: a stage's
//! `stage_changed` event (`stage:<stage>` in round 1, `stage:<stage>:r<round>` after) and a
//! round's bundles (`retrieval:<n>` / `retrieval:r<round>:<n>`, `evidence` /
//! `evidence:r<round>`). One codec each: the code that writes a key and the code that reads
//! it back go through the same `encode` and `decode`.
use super::stage::Stage;

/// The key of the `stage_changed` event a task's move into `stage` wrote in `round`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageKey {
    /// The stage moved into.
    pub stage: Stage,
    /// The research round (1 for the first, and for stages outside rounds).
    pub round: u32,
}

impl StageKey {
    /// The stored key.
    pub fn encode(self) -> String {
        if self.round > 1 {
            format!("stage:{}:r{}", self.stage.as_str(), self.round)
        } else {
            format!("stage:{}", self.stage.as_str())
        }
    }

    /// What every key of moves into `stage` starts with (to read them back by prefix).
    pub fn prefix(stage: Stage) -> String {
        format!("stage:{}", stage.as_str())
    }

    /// The key `key` encodes, if it is a stage key of `stage`.
    pub fn decode(stage: Stage, key: &str) -> Option<Self> {
        let rest = key.strip_prefix(&Self::prefix(stage))?;
        let round = match rest {
            "" => 1,
            rest => rest.strip_prefix(":r")?.parse().ok().filter(|round| *round > 1)?,
        };
        Some(Self { stage, round })
    }
}

/// The key of a partial result a research round wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleKey {
    /// The `n`-th sub-query's retrieval (1-based) of `round`.
    Retrieval {
        /// The round.
        round: u32,
        /// The sub-query's place in the round's plan, from 1.
        n: usize,
    },
    /// The evidence `round` kept.
    Evidence {
        /// The round.
        round: u32,
    },
}

impl BundleKey {
    /// What every evidence key starts with.
    pub const EVIDENCE_PREFIX: &str = "evidence";

    /// The stored key.
    pub fn encode(self) -> String {
        match self {
            Self::Retrieval { round, n } if round > 1 => format!("retrieval:r{round}:{n}"),
            Self::Retrieval { n, .. } => format!("retrieval:{n}"),
            Self::Evidence { round } if round > 1 => format!("evidence:r{round}"),
            Self::Evidence { .. } => Self::EVIDENCE_PREFIX.to_owned(),
        }
    }

    /// What every retrieval key of `round` starts with (round 1's prefix also starts the
    /// later rounds' keys: [`Self::decode`] tells them apart).
    pub fn retrieval_prefix(round: u32) -> String {
        if round > 1 { format!("retrieval:r{round}:") } else { "retrieval:".to_owned() }
    }

    /// The key `key` encodes, if it is a bundle key.
    pub fn decode(key: &str) -> Option<Self> {
        if key == Self::EVIDENCE_PREFIX {
            return Some(Self::Evidence { round: 1 });
        }
        if let Some(round) = key.strip_prefix("evidence:r") {
            return Some(Self::Evidence { round: round.parse().ok().filter(|round| *round > 1)? });
        }
        let rest = key.strip_prefix("retrieval:")?;
        match rest.strip_prefix('r') {
            Some(rest) => {
                let (round, n) = rest.split_once(':')?;
                let round = round.parse().ok().filter(|round| *round > 1)?;
                Some(Self::Retrieval { round, n: n.parse().ok()? })
            }
            None => Some(Self::Retrieval { round: 1, n: rest.parse().ok()? }),
        }
    }

    /// Whether this is an evidence key.
    pub fn is_evidence(key: &str) -> bool {
        matches!(Self::decode(key), Some(Self::Evidence { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_back_as_written() {
        for round in [1, 2, 7] {
            let stage = StageKey { stage: Stage::Retrieving, round };
            assert_eq!(StageKey::decode(Stage::Retrieving, &stage.encode()), Some(stage));
            for key in [BundleKey::Retrieval { round, n: 3 }, BundleKey::Evidence { round }] {
                assert_eq!(BundleKey::decode(&key.encode()), Some(key), "{}", key.encode());
            }
        }
        assert_eq!(StageKey { stage: Stage::Analyzing, round: 1 }.encode(), "stage:analyzing");
        assert_eq!(BundleKey::Retrieval { round: 2, n: 1 }.encode(), "retrieval:r2:1");
        assert_eq!(BundleKey::Evidence { round: 1 }.encode(), "evidence");
    }

    #[test]
    fn other_keys_are_not_read_as_these() {
        assert_eq!(StageKey::decode(Stage::Retrieving, "stage:retrieving:x"), None);
        assert_eq!(StageKey::decode(Stage::Retrieving, "stage:analyzing"), None);
        assert_eq!(StageKey::decode(Stage::Retrieving, "stage:retrieving:r1"), None);
        assert_eq!(BundleKey::decode("evidence:rx"), None);
        assert_eq!(BundleKey::decode("retrieval:r2"), None);
        assert_eq!(BundleKey::decode("started"), None);
        assert!(BundleKey::is_evidence("evidence:r3"));
        assert!(!BundleKey::is_evidence("evidence-extra"));
    }
}
