//! The compatibility matrix: what a session gets, given the gateway's
//! delivery mode and what the supervisor's hello advertises.

use crate::config::DeliveryMode;
use crate::session_registry::NegotiatedMode;

/// What the hello says the supervisor can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub protocol_revision: u32,
    pub supports_config_snapshots: bool,
    pub supports_config_apply: bool,
}

/// The negotiated outcome and the reason shown by `sessions inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiation {
    pub mode: NegotiatedMode,
    pub push_enabled: bool,
    pub apply_enabled: bool,
    pub legacy: bool,
    pub reason: String,
}

pub fn negotiate(gateway: DeliveryMode, caps: Capabilities) -> Negotiation {
    let legacy = caps.protocol_revision == 0;
    match gateway {
        DeliveryMode::Poll => Negotiation {
            mode: NegotiatedMode::Poll,
            push_enabled: false,
            apply_enabled: false,
            legacy,
            reason: "gateway config_delivery_mode is poll; the supervisor polls".into(),
        },
        DeliveryMode::Push if legacy || !caps.supports_config_snapshots => Negotiation {
            mode: NegotiatedMode::Poll,
            push_enabled: false,
            apply_enabled: false,
            legacy,
            reason: if legacy {
                "legacy supervisor (protocol revision 0) keeps polling".into()
            } else {
                "supervisor does not accept config snapshots; it keeps polling".into()
            },
        },
        DeliveryMode::Push if !caps.supports_config_apply => Negotiation {
            mode: NegotiatedMode::ShadowPush,
            push_enabled: true,
            apply_enabled: false,
            legacy,
            reason: "supervisor receives snapshots but does not apply them (shadow push); it keeps polling".into(),
        },
        DeliveryMode::Push => Negotiation {
            mode: NegotiatedMode::Push,
            push_enabled: true,
            apply_enabled: true,
            legacy,
            reason: "gateway is in push mode and the supervisor applies pushed snapshots".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(protocol_revision: u32, snapshots: bool, apply: bool) -> Capabilities {
        Capabilities {
            protocol_revision,
            supports_config_snapshots: snapshots,
            supports_config_apply: apply,
        }
    }

    #[test]
    fn the_compatibility_matrix() {
        let poll = negotiate(DeliveryMode::Poll, caps(1, true, true));
        assert_eq!(
            (poll.mode, poll.push_enabled, poll.apply_enabled),
            (NegotiatedMode::Poll, false, false)
        );
        let legacy = negotiate(DeliveryMode::Push, caps(0, false, false));
        assert_eq!((legacy.mode, legacy.legacy), (NegotiatedMode::Poll, true));
        assert!(legacy.reason.contains("legacy"));
        let shadow = negotiate(DeliveryMode::Push, caps(1, true, false));
        assert_eq!(
            (shadow.mode, shadow.push_enabled, shadow.apply_enabled),
            (NegotiatedMode::ShadowPush, true, false)
        );
        let push = negotiate(DeliveryMode::Push, caps(1, true, true));
        assert_eq!(
            (push.mode, push.push_enabled, push.apply_enabled),
            (NegotiatedMode::Push, true, true)
        );
        // A legacy peer in a poll gateway is still counted as legacy.
        assert!(negotiate(DeliveryMode::Poll, caps(0, false, false)).legacy);
    }
}
