//! Dirty marks: which components of a session need a rebuild, and in
//! which lane. Marks merge (a set of components, the most urgent lane) so
//! memory is O(sessions × components) however many writes arrive.

/// A snapshot component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    SandboxConfig,
    ProviderEnvironment,
}

impl Component {
    pub const ALL: [Component; 2] = [Component::SandboxConfig, Component::ProviderEnvironment];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SandboxConfig => "sandbox_config",
            Self::ProviderEnvironment => "provider_environment",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::SandboxConfig => 1,
            Self::ProviderEnvironment => 2,
        }
    }

    pub fn index(self) -> usize {
        match self {
            Self::SandboxConfig => 0,
            Self::ProviderEnvironment => 1,
        }
    }
}

/// Which permit pool a build waits in. `Sandbox` is for a change to that one
/// sandbox and may use the reserve; `Fanout` is for fleet changes and reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    Fanout,
    Sandbox,
}

impl Lane {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fanout => "fanout",
            Self::Sandbox => "sandbox",
        }
    }
}

/// The pending mark of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    components: u8,
    lane: Option<Lane>,
}

impl Mark {
    pub fn new(components: &[Component], lane: Lane) -> Self {
        let mut mark = Self::default();
        for c in components {
            mark.components |= c.bit();
        }
        if mark.components != 0 {
            mark.lane = Some(lane);
        }
        mark
    }

    /// Merges another mark in: the union of components, the more urgent lane.
    pub fn merge(&mut self, other: Mark) {
        self.components |= other.components;
        self.lane = match (self.lane, other.lane) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub fn is_empty(&self) -> bool {
        self.components == 0
    }

    pub fn lane(&self) -> Lane {
        self.lane.unwrap_or(Lane::Fanout)
    }

    pub fn contains(&self, c: Component) -> bool {
        self.components & c.bit() != 0
    }

    pub fn components(&self) -> impl Iterator<Item = Component> + '_ {
        Component::ALL.into_iter().filter(|c| self.contains(*c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_merge_components_and_keep_the_urgent_lane() {
        let mut mark = Mark::new(&[Component::SandboxConfig], Lane::Fanout);
        mark.merge(Mark::new(&[Component::ProviderEnvironment], Lane::Sandbox));
        assert!(mark.contains(Component::SandboxConfig));
        assert!(mark.contains(Component::ProviderEnvironment));
        assert_eq!(mark.lane(), Lane::Sandbox);
        mark.merge(Mark::new(&[Component::SandboxConfig], Lane::Fanout));
        assert_eq!(mark.lane(), Lane::Sandbox);
        assert!(Mark::default().is_empty());
        assert!(Mark::new(&[], Lane::Sandbox).is_empty());
    }
}
