use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Where a research task stands; the seed's `research_task_jobs_stage_ck` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Created, waiting for its first claim.
    #[sea_orm(string_value = "queued")]
    Queued,
    /// Splitting the query into sub-queries.
    #[sea_orm(string_value = "planning")]
    Planning,
    /// Ranking the space's documents.
    #[sea_orm(string_value = "retrieving")]
    Retrieving,
    /// Selecting and deduplicating evidence.
    #[sea_orm(string_value = "analyzing")]
    Analyzing,
    /// Writing the answer.
    #[sea_orm(string_value = "generating")]
    Generating,
    /// Stopped by its owner; remembers `paused_from_stage`.
    #[sea_orm(string_value = "paused")]
    Paused,
    /// Finished with an answer trace. Terminal.
    #[sea_orm(string_value = "completed")]
    Completed,
    /// Gave up, with the error kept. Terminal.
    #[sea_orm(string_value = "failed")]
    Failed,
    /// Canceled by its owner. Terminal.
    #[sea_orm(string_value = "canceled")]
    Canceled,
}

/// A command a caller may give a task through the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleCommand {
    /// Stop for good.
    Cancel,
    /// Stop for now, remembering where.
    Pause,
    /// Go on from where the pause stopped.
    Resume,
}

/// Why a stage change is refused; carries the stage the task is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionError {
    /// The stage the task is in now.
    pub current: Stage,
}

impl std::fmt::Display for TransitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not allowed while the task is {}", self.current.as_str())
    }
}

impl std::error::Error for TransitionError {}

impl Stage {
    /// The seed's string for this stage.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Planning => "planning",
            Self::Retrieving => "retrieving",
            Self::Analyzing => "analyzing",
            Self::Generating => "generating",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Completed, failed and canceled: nothing follows them.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }

    /// The stages a worker runs (the ones a lease belongs to).
    pub fn is_running(self) -> bool {
        matches!(self, Self::Planning | Self::Retrieving | Self::Analyzing | Self::Generating)
    }

    /// Queued or running: the stages a worker may claim once the lease is free.
    pub fn is_claimable(self) -> bool {
        self == Self::Queued || self.is_running()
    }

    /// The stage the pipeline moves to when this one's work is done.
    pub fn next_in_pipeline(self) -> Option<Stage> {
        match self {
            Self::Queued => Some(Self::Planning),
            Self::Planning => Some(Self::Retrieving),
            Self::Retrieving => Some(Self::Analyzing),
            Self::Analyzing => Some(Self::Generating),
            Self::Generating => Some(Self::Completed),
            Self::Paused | Self::Completed | Self::Failed | Self::Canceled => None,
        }
    }

    /// The one rule of which stage may follow which. `paused_from` is the stage a paused
    /// task remembers; a resume may only return there.
    pub fn may_become(self, to: Stage, paused_from: Option<Stage>) -> bool {
        if self.is_terminal() {
            return false;
        }
        match to {
            Self::Queued => self == Self::Paused && paused_from == Some(Self::Queued),
            // Analysis may send the task back for another round of retrieval.
            Self::Retrieving if self == Self::Analyzing => true,
            Self::Planning | Self::Retrieving | Self::Analyzing | Self::Generating => {
                self.next_in_pipeline() == Some(to) || (self == Self::Paused && paused_from == Some(to))
            }
            Self::Completed => self == Self::Generating,
            Self::Paused => self.is_claimable(),
            Self::Failed | Self::Canceled => true,
        }
    }

    /// What a lifecycle command makes of a task in this stage, or why it may not.
    pub fn apply(self, command: LifecycleCommand, paused_from: Option<Stage>) -> Result<Stage, TransitionError> {
        let target = match command {
            LifecycleCommand::Cancel => Some(Self::Canceled),
            LifecycleCommand::Pause => Some(Self::Paused),
            LifecycleCommand::Resume if self == Self::Paused => paused_from,
            LifecycleCommand::Resume => None,
        };
        match target {
            Some(to) if self.may_become(to, paused_from) => Ok(to),
            _ => Err(TransitionError { current: self }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Stage::*;
    use sea_orm::{ActiveEnum, Iterable};

    /// The expected rule, written out as a table so a change to `may_become` must change
    /// this too. Rows are `from`, columns are `to` in declaration order.
    fn expected(from: Stage, to: Stage, paused_from: Option<Stage>) -> bool {
        let pipeline = [
            (Queued, Planning),
            (Planning, Retrieving),
            (Retrieving, Analyzing),
            (Analyzing, Generating),
            (Analyzing, Retrieving),
            (Generating, Completed),
        ];
        if from.is_terminal() {
            return false;
        }
        if pipeline.contains(&(from, to)) {
            return true;
        }
        match (from, to) {
            (_, Failed | Canceled) => true,
            (Queued | Planning | Retrieving | Analyzing | Generating, Paused) => true,
            (Paused, to) => paused_from == Some(to) && to.is_claimable(),
            _ => false,
        }
    }

    #[test]
    fn every_pair_of_stages_follows_the_rule() {
        let remembered = std::iter::once(None).chain(Stage::iter().map(Some));
        for paused_from in remembered {
            for from in Stage::iter() {
                for to in Stage::iter() {
                    assert_eq!(
                        from.may_become(to, paused_from),
                        expected(from, to, paused_from),
                        "{from:?} -> {to:?} (paused from {paused_from:?})"
                    );
                }
            }
        }
    }

    #[test]
    fn terminal_stages_accept_no_command() {
        for stage in [Completed, Failed, Canceled] {
            for command in [LifecycleCommand::Cancel, LifecycleCommand::Pause, LifecycleCommand::Resume] {
                assert_eq!(stage.apply(command, None), Err(TransitionError { current: stage }));
            }
        }
    }

    #[test]
    fn resume_returns_to_the_stage_the_pause_remembered() {
        assert_eq!(Paused.apply(LifecycleCommand::Resume, Some(Analyzing)), Ok(Analyzing));
        assert_eq!(Paused.apply(LifecycleCommand::Resume, Some(Queued)), Ok(Queued));
        assert!(Paused.apply(LifecycleCommand::Resume, None).is_err());
        assert!(Planning.apply(LifecycleCommand::Resume, None).is_err());
    }

    #[test]
    fn a_paused_task_cannot_be_paused_again_but_can_be_canceled() {
        assert!(Paused.apply(LifecycleCommand::Pause, Some(Planning)).is_err());
        assert_eq!(Paused.apply(LifecycleCommand::Cancel, Some(Planning)), Ok(Canceled));
    }

    #[test]
    fn string_forms_are_the_seed_check_values() {
        let seed = "queued planning retrieving analyzing generating paused completed failed canceled";
        let ours: Vec<_> = Stage::iter().map(|stage| stage.as_str()).collect();
        assert_eq!(ours.join(" "), seed);
        for stage in Stage::iter() {
            assert_eq!(stage.to_value(), stage.as_str());
        }
    }

    #[test]
    fn the_pipeline_ends_in_completed() {
        let mut stage = Queued;
        let mut walked = vec![stage];
        while let Some(next) = stage.next_in_pipeline() {
            stage = next;
            walked.push(stage);
        }
        assert_eq!(walked, [Queued, Planning, Retrieving, Analyzing, Generating, Completed]);
    }

    #[test]
    fn claimable_and_running_stages_are_derived_from_the_pipeline() {
        let claimable: Vec<Stage> = Stage::iter().filter(|stage| stage.is_claimable()).collect();
        assert_eq!(claimable, [Queued, Planning, Retrieving, Analyzing, Generating]);
        // A running stage is one the engine runs: it has a next stage, and it is not the
        // queue the first claim takes a task out of.
        for stage in Stage::iter() {
            assert_eq!(stage.is_running(), stage != Queued && stage.next_in_pipeline().is_some(), "{stage:?}");
        }
    }
}
