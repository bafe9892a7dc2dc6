//! Migration safety: what is compared before anything is applied ([`check`]), how a kubeadm
//! cluster's PKI and encryption key become a sealed Talos bundle ([`import`]), the phase
//! plan with its commands ([`plan`]), and the field errors mapped to cause and fix
//! ([`explain`]). Depends on the inputs and the secrets, never on rendering.

pub mod check;
pub mod explain;
pub mod import;
pub mod plan;
