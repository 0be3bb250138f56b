//! The protocol's rules for admitting a client's `connection_init` and `subscribe`, as
//! pure functions of the connection's state, so the state machine is tested apart from
//! the socket: a second init closes with 4429, a subscribe before the acknowledgement with
//! 4401, a subscribe reusing a running id with 4409, and one past the operation limit is
//! refused for its id alone.
use super::protocol::close;

/// What the connection does with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Accept,
    /// Refuse this operation alone, with an `error` message carrying this text.
    Refuse(String),
    /// Close the connection with this code and reason.
    Close(u16, String),
}

/// A `connection_init`, on a connection that was `initialised` already or not.
pub fn admit_init(initialised: bool) -> Admission {
    if initialised {
        Admission::Close(close::TOO_MANY_INITS, "Too many initialisation requests".into())
    } else {
        Admission::Accept
    }
}

/// A `subscribe` with an id that is `running` already or not, while `running_count`
/// operations run and `limit` may.
pub fn admit_subscribe(initialised: bool, id: &str, running: bool, running_count: usize, limit: usize) -> Admission {
    if !initialised {
        return Admission::Close(close::UNAUTHORIZED, "Unauthorized".into());
    }
    if running {
        return Admission::Close(close::DUPLICATE_ID, format!("Subscriber for {id} already exists"));
    }
    if running_count >= limit {
        return Admission::Refuse(format!("at most {limit} operations may run on one connection"));
    }
    Admission::Accept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_init_closes_with_4429() {
        assert_eq!(admit_init(false), Admission::Accept);
        assert!(matches!(admit_init(true), Admission::Close(4429, _)));
    }

    #[test]
    fn a_subscribe_before_the_acknowledgement_closes_with_4401_whatever_else_holds() {
        assert!(matches!(admit_subscribe(false, "1", false, 0, 10), Admission::Close(4401, _)));
        assert!(matches!(admit_subscribe(false, "1", true, 99, 10), Admission::Close(4401, _)));
    }

    #[test]
    fn a_running_id_closes_with_4409_even_at_the_limit() {
        assert!(
            matches!(admit_subscribe(true, "7", true, 10, 10), Admission::Close(4409, reason) if reason.contains('7'))
        );
    }

    #[test]
    fn past_the_limit_only_that_operation_is_refused() {
        assert_eq!(admit_subscribe(true, "1", false, 9, 10), Admission::Accept);
        assert!(matches!(admit_subscribe(true, "1", false, 10, 10), Admission::Refuse(_)));
    }
}
