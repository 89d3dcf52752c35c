//! A sandbox's identity read through upstream's nested layout (`metadata`, `spec`):
//! every reader asks the same questions, and an absent part reads as empty.

use crate::v1::Sandbox;

impl Sandbox {
    /// The sandbox id ("sb-…"); empty when the record carries no metadata.
    pub fn id(&self) -> &str {
        self.metadata.as_ref().map_or("", |m| m.id.as_str())
    }

    /// The sandbox name.
    pub fn name(&self) -> &str {
        self.metadata.as_ref().map_or("", |m| m.name.as_str())
    }

    /// The workspace the sandbox belongs to.
    pub fn workspace(&self) -> &str {
        self.metadata.as_ref().map_or("", |m| m.workspace.as_str())
    }

    /// The attached providers' names, sorted.
    pub fn providers(&self) -> &[String] {
        self.spec.as_ref().map_or(&[], |s| s.providers.as_slice())
    }
}
