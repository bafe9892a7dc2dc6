//! capstan's integration tests: one binary, one module per area.

// Shared helpers: running the binary, temp copies of the example repository.
mod util;
// The library's shape: no import cycle, a `//!` line on every file, none too long.
mod architecture;
// The library's facade: render a repository, review two revisions, check a cluster.
mod facade;
// `capstan render`: golden output, determinism, the bundle directory, error paths.
mod render;
// `capstan validate`: strict CRD validation from the command line.
mod validate;
// `capstan import kubeadm` and `capstan secrets decrypt`, on fixtures the project builds.
mod import;
// Sealed secrets: seal, render passthrough and refusals, rekey, decrypt, leak scan.
mod secrets;
// The migration phases: the Jobs' shell scripts run against a simulated control plane.
mod migration;
// A model of the providers from their source, with the Jobs' scripts run against it.
mod provider_model;
// The life after the migration on the same model: every Day-2 operation, `capstan rehearse`.
mod rehearse;
// Nothing a phase adds outlives it: the nodeRef policy's CEL, the unpause Job's deletion of
// it (against a fake kubectl), README's table of what each phase adds and what removes it.
mod phase_leftovers;
// The control-plane rollback's etcd steps against a real six-member etcd.
mod etcd;
// `capstan explain`: known migration errors to cause, check finding and fix; exit codes.
mod explain;
// The control-plane endpoint through rollouts: a model of a rolling control plane from the
// providers' source, on what capstan renders and its runbook's backend list.
mod endpoint;
// `capstan check`: one test per finding, the import stub, the JSON report, bad inputs.
mod check;
// `capstan diff`: classification, risk notes, secret safety, git revisions, Markdown size.
mod diff;
// `diff --git` in a repository armed with every trap git has: none runs, the real change is read.
mod git_traps;
// `capstan argocd generate` as Argo CD's sidecar runs it, `secrets seal-operator`, `init`,
// and deploy/argocd/ checked as data.
mod argocd;
// Overlays: layering, patch kinds, selectors, Talos patches, loader rules and their errors.
mod overlays;
// The differential corpus: strategic and RFC 6902 patches, capstan against kubectl kustomize.
mod overlay_corpus;
// Untrusted repositories: confined reads, special and huge files, bounded templates, sealed
// objects, broken files in diff, all-or-nothing `render -o`.
mod untrusted;
// The hostile corpus: over 100 inputs a pull request could carry, each refused cleanly.
mod hostile;
// `capstan backup`: the encrypted round trip on a local store and every refusal.
mod backup;
// CLI conventions: --version with the commit, completions, the man page.
mod cli;
// The CI templates (deploy/ci) as their runners run them: the job image's entrypoint and
// user, the scripts as the image's UID, the GitLab API mocked, the GitHub comment script.
mod ci;
// Terminal-safe output: every printer fed ESC, OSC, CR, LF, U+202E and a Markdown fence.
mod terminal;

// One scripting convention (issue 42 item 5) and the sops habits of item 6.
mod conventions;
