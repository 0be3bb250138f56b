/// Why a permission snapshot (the durable grant a task runs under) no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrantDenial {
    /// The snapshot is gone.
    Missing,
    /// The member was removed, or the membership changed since the grant.
    MembershipChanged,
    /// The API key was rotated since the grant.
    KeyRotated,
    /// The API key was revoked (or deleted).
    KeyRevoked,
    /// The API key, or the grant's copy of its expiry, expired.
    KeyExpired,
}

impl GrantDenial {
    /// Every denial's name, in declaration order: the grant rule's SQL answers these, and
    /// `research_grant_denials_total{reason}` counts by them.
    pub const LABELS: &[&str] = &["missing", "membershipchanged", "keyrotated", "keyrevoked", "keyexpired"];

    /// Its name.
    pub fn label(self) -> &'static str {
        match self {
            Self::Missing => Self::LABELS[0],
            Self::MembershipChanged => Self::LABELS[1],
            Self::KeyRotated => Self::LABELS[2],
            Self::KeyRevoked => Self::LABELS[3],
            Self::KeyExpired => Self::LABELS[4],
        }
    }

    /// The denial a name stands for (the grant rule's SQL answers names); an unknown name
    /// counts as `Missing`, the denial that reveals nothing.
    pub fn from_label(label: &str) -> Self {
        [Self::Missing, Self::MembershipChanged, Self::KeyRotated, Self::KeyRevoked, Self::KeyExpired]
            .into_iter()
            .find(|denial| denial.label() == label)
            .unwrap_or(Self::Missing)
    }

    /// A sentence for task errors and logs.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "permission denied: the task's grant no longer exists",
            Self::MembershipChanged => {
                "permission denied: the membership behind the task's grant changed or was removed"
            }
            Self::KeyRotated => "permission denied: the API key behind the task's grant was rotated",
            Self::KeyRevoked => "permission denied: the API key behind the task's grant was revoked",
            Self::KeyExpired => "permission denied: the API key behind the task's grant expired",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_names_its_denial() {
        for label in GrantDenial::LABELS {
            assert_eq!(GrantDenial::from_label(label).label(), *label);
        }
        assert_eq!(GrantDenial::from_label("nonsense"), GrantDenial::Missing);
    }
}
