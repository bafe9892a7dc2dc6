//! The Kubernetes API as the migration Jobs' `kubectl` calls reach it in the model: each call
//! is answered from the [`World`] (and may change it), exactly the calls the rendered Job
//! scripts make; anything else is answered as an error the script must handle. Faults are
//! injected per call ([`Fault`]).

use super::model::{Fault, World, ANN_PAUSED, MANAGER_ANNOTATE};
use serde_json::Value;

/// A shim's answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The exit code, or `kill` (the shim kills its process group).
    pub code: String,
    /// Standard output.
    pub out: String,
    /// Standard error.
    pub err: String,
}

impl Reply {
    /// Exit 0 with this output.
    pub fn ok(out: &str) -> Reply {
        Reply {
            code: "0".into(),
            out: out.into(),
            err: String::new(),
        }
    }

    /// Exit `code` with this message on stderr.
    pub fn err(code: i32, err: &str) -> Reply {
        Reply {
            code: code.to_string(),
            out: String::new(),
            err: format!("{err}\n"),
        }
    }

    /// The pod is killed.
    pub fn kill() -> Reply {
        Reply {
            code: "kill".into(),
            out: String::new(),
            err: String::new(),
        }
    }
}

const THROTTLED: &str = "Error from server (TooManyRequests): the server has received too many requests and has asked us to try again later";
/// The guard's read of the CA fingerprint capstan's sealed `<cluster>-ca` carries
/// (`templates/migration/lib.sh`, `ca_check`).
const CA_ANNOTATION_JSONPATH: &str = "jsonpath={.metadata.annotations.capstan\\.dev/kubernetes-ca}";
const TCP_RES: &str = "taloscontrolplanes.controlplane.cluster.x-k8s.io";

/// `validatingadmissionpolic(y|ies)[bindings].admissionregistration.k8s.io/NAME` as (kind,
/// name).
fn admission_object(arg: &str) -> Option<(&'static str, &str)> {
    let (res, name) = arg.split_once('/')?;
    let kind = match res.split('.').next()? {
        "validatingadmissionpolicybindings" | "validatingadmissionpolicybinding" => {
            "ValidatingAdmissionPolicyBinding"
        }
        "validatingadmissionpolicies" | "validatingadmissionpolicy" => "ValidatingAdmissionPolicy",
        _ => return None,
    };
    Some((kind, name))
}

impl World {
    /// One kubectl call of a Job: the controllers reconcile first, then the fault (if this
    /// call is the one), then the answer.
    pub fn kubectl(&mut self, args: &[String]) -> Reply {
        self.calls += 1;
        self.trace.push(args.join(" "));
        self.tick();
        let call = self.calls;
        match self.fault {
            Some(Fault::Fail(n)) if n == call => return Reply::err(1, THROTTLED),
            Some(Fault::Timeout(n)) if n == call => {
                self.advance(20);
                return Reply::err(
                    1,
                    "Unable to connect to the server: context deadline exceeded",
                );
            }
            Some(Fault::Empty(n)) if n == call => return Reply::ok(""),
            Some(Fault::GarbageWord(n)) if n == call => return Reply::ok("Unauthorized\n"),
            Some(Fault::Garbage(n)) if n == call => {
                return Reply::ok("<html><body>502 Bad Gateway</body></html>\n");
            }
            Some(Fault::FailMatching(needle, times))
                if self.failed_matching < times && args.iter().any(|a| a.contains(needle)) =>
            {
                self.failed_matching += 1;
                return Reply::err(1, THROTTLED);
            }
            _ => {}
        }
        let reply = self.kubectl_answer(args);
        if self.fault == Some(Fault::KillAfterUnpause)
            && args.iter().any(|a| a == "cluster.x-k8s.io/paused-")
            && !self.kill_now
        {
            self.kill_now = true;
            return Reply::kill();
        }
        reply
    }

    #[expect(clippy::too_many_lines, reason = "a table: one arm per kubectl call the migration Jobs make")]
    fn kubectl_answer(&mut self, args: &[String]) -> Reply {
        let mut rest: Vec<&str> = Vec::new();
        let mut workload = false;
        let mut it = args.iter().map(String::as_str);
        let ns = self.facts.namespace.clone();
        while let Some(a) = it.next() {
            if a.starts_with("--request-timeout=") {
                continue;
            }
            if a.starts_with("--kubeconfig=") {
                workload = true;
                continue;
            }
            if a == "-n" {
                let n = it.next().unwrap_or_default();
                if n != ns && n != "kube-system" {
                    return Reply::err(3, &format!("model: unexpected namespace {n}"));
                }
                continue;
            }
            rest.push(a);
        }
        let not_found = |what: &str| {
            Reply::err(
                1,
                &format!("Error from server (NotFound): {what} not found"),
            )
        };
        let tcp_name = self.facts.control_plane.clone();
        let cp_selector = format!(
            "cluster.x-k8s.io/cluster-name={},cluster.x-k8s.io/control-plane",
            self.facts.cluster
        );
        let unexpected = |what: &str| Reply::err(3, &format!("model: unexpected {what}"));
        match rest.as_slice() {
            ["get", "pods", "-l", "component=etcd", "-o", jsonpath] if workload => {
                if *jsonpath != "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}" {
                    return unexpected(jsonpath);
                }
                let mut out = String::new();
                for n in self.kubeadm_nodes.iter().chain(&self.stray_etcd_pods) {
                    out.push_str(&format!("etcd-{n}\n"));
                }
                Reply::ok(&out)
            }
            ["get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", jsonpath]
                if workload =>
            {
                if *jsonpath
                    != "jsonpath={range .items[*]}{.metadata.name}{\"|\"}{.status.nodeInfo.osImage}{\"\\n\"}{end}"
                {
                    return unexpected(jsonpath);
                }
                let mut out = String::new();
                for n in &self.kubeadm_nodes {
                    out.push_str(&format!("{n}|Ubuntu 22.04.4 LTS\n"));
                }
                for v in self
                    .vms
                    .iter()
                    .filter(|v| v.control_plane && self.node_up(v))
                {
                    out.push_str(&format!("{}|Talos (v1.10.6)\n", v.name));
                }
                Reply::ok(&out)
            }
            _ if workload => unexpected(&format!("workload call {rest:?}")),
            ["get", res, name, "-o", template]
                if *res == TCP_RES && template.starts_with("go-template=") =>
            {
                if *name != tcp_name
                    || *template
                        != "go-template={{range $k, $v := .metadata.annotations}}{{if eq $k \"cluster.x-k8s.io/paused\"}}paused{{end}}{{end}}"
                {
                    return unexpected(&format!("call {rest:?}"));
                }
                match &self.tcp {
                    None => not_found(&format!("{TCP_RES} \"{tcp_name}\"")),
                    Some(t) => Reply::ok(if t.annotations.contains_key(ANN_PAUSED) {
                        "paused"
                    } else {
                        ""
                    }),
                }
            }
            ["get", "clusters.cluster.x-k8s.io", name, "-o", what] => {
                if *name != self.facts.cluster {
                    return unexpected(name);
                }
                match *what {
                    "name" => Reply::ok(&format!("cluster.cluster.x-k8s.io/{name}")),
                    // `spec.paused` (a killed `clusterctl move` leaves it true).
                    "jsonpath={.spec.paused}" => {
                        Reply::ok(if self.cluster_paused { "true" } else { "" })
                    }
                    other => unexpected(&format!("output {other}")),
                }
            }
            ["get", res, name, "-o", jsonpath] if *res == TCP_RES => {
                if *name != tcp_name {
                    return unexpected(name);
                }
                let Some(tcp) = &self.tcp else {
                    return not_found(&format!("{TCP_RES} \"{tcp_name}\""));
                };
                match *jsonpath {
                    "jsonpath={.metadata.name}" => Reply::ok(&tcp_name),
                    "jsonpath={.status.bootstrapped}" => {
                        Reply::ok(if tcp.bootstrapped { "true" } else { "" })
                    }
                    "jsonpath={.metadata.annotations.cluster\\.x-k8s\\.io/paused}" => Reply::ok(
                        tcp.annotations
                            .get(ANN_PAUSED)
                            .map(String::as_str)
                            .unwrap_or(""),
                    ),
                    other => unexpected(&format!("jsonpath {other}")),
                }
            }
            ["get", "machines.cluster.x-k8s.io", "-l", selector, "-o", "name"] => {
                if *selector != cp_selector {
                    return unexpected(selector);
                }
                let mut out = String::new();
                for m in self.machines.iter().filter(|m| m.deployment.is_none()) {
                    out.push_str(&format!("machine.cluster.x-k8s.io/{}\n", m.name));
                }
                Reply::ok(&out)
            }
            ["get", "machines.cluster.x-k8s.io", "-l", selector, "-o", jsonpath] => {
                if *selector != cp_selector
                    || *jsonpath
                        != "jsonpath={range .items[*]}{.metadata.name}{\" \"}{.status.nodeRef.name}{\"\\n\"}{end}"
                {
                    return unexpected(&format!("call {rest:?}"));
                }
                let mut out = String::new();
                for m in self.machines.iter().filter(|m| m.deployment.is_none()) {
                    out.push_str(&format!(
                        "{} {}\n",
                        m.name,
                        m.node_ref.clone().unwrap_or_default()
                    ));
                }
                Reply::ok(&out)
            }
            ["get", "secret", name, "-o", jsonpath] if *jsonpath == CA_ANNOTATION_JSONPATH => {
                if !self.secrets.contains(*name) {
                    return not_found(&format!("secrets \"{name}\""));
                }
                // A Secret a controller wrote is known by name only: no annotations.
                let annotation = self
                    .live
                    .get(&("Secret".to_string(), ns.clone(), name.to_string()))
                    .and_then(|o| {
                        o.value
                            .pointer("/metadata/annotations/capstan.dev~1kubernetes-ca")
                            .and_then(Value::as_str)
                    })
                    .unwrap_or_default();
                Reply::ok(annotation)
            }
            ["get", "secret", names @ .., "-o", "name"] => {
                let mut out = String::new();
                for n in names {
                    if !self.secrets.contains(*n) {
                        return not_found(&format!("secrets \"{n}\""));
                    }
                    out.push_str(&format!("secret/{n}\n"));
                }
                Reply::ok(&out)
            }
            ["get", "secret", name, "-o", template] if template.starts_with("go-template=") => {
                if *template != "go-template={{.data.value | base64decode}}" {
                    return unexpected(template);
                }
                if !self.secrets.contains(*name) {
                    return not_found(&format!("secrets \"{name}\""));
                }
                Reply::ok("apiVersion: v1\nkind: Config\n")
            }
            ["patch", res, name, "--subresource=status", "--type=merge", "-p", patch]
                if *res == TCP_RES =>
            {
                if *name != tcp_name || *patch != "{\"status\":{\"bootstrapped\":true}}" {
                    return unexpected(&format!("call {rest:?}"));
                }
                match &mut self.tcp {
                    None => not_found(&tcp_name),
                    Some(t) => {
                        t.bootstrapped = true;
                        Reply::ok(&format!(
                            "taloscontrolplane.controlplane.cluster.x-k8s.io/{tcp_name} patched\n"
                        ))
                    }
                }
            }
            ["annotate", res, name, "cluster.x-k8s.io/paused=true", "--overwrite"]
                if *res == TCP_RES =>
            {
                if *name != tcp_name {
                    return unexpected(name);
                }
                if self.tcp.is_none() {
                    return not_found(&tcp_name);
                }
                self.update_annotation(MANAGER_ANNOTATE, ANN_PAUSED, Some("true"));
                Reply::ok(&format!(
                    "taloscontrolplane.controlplane.cluster.x-k8s.io/{tcp_name} annotated\n"
                ))
            }
            ["annotate", res, name, "cluster.x-k8s.io/paused-"] if *res == TCP_RES => {
                if *name != tcp_name {
                    return unexpected(name);
                }
                if self.tcp.is_none() {
                    return not_found(&tcp_name);
                }
                self.update_annotation(MANAGER_ANNOTATE, ANN_PAUSED, None);
                Reply::ok(&format!(
                    "taloscontrolplane.controlplane.cluster.x-k8s.io/{tcp_name} annotated\n"
                ))
            }
            ["delete", objects @ .., "--ignore-not-found", "--wait=false", "-o", "name"] => {
                let mut out = String::new();
                for o in objects {
                    let Some((kind, name)) = admission_object(o) else {
                        return unexpected(&format!("delete of {o}"));
                    };
                    if self.delete_admission_object(kind, name) {
                        let singular = if kind == "ValidatingAdmissionPolicyBinding" {
                            "validatingadmissionpolicybinding"
                        } else {
                            "validatingadmissionpolicy"
                        };
                        out.push_str(&format!("{singular}.admissionregistration.k8s.io/{name}\n"));
                    }
                }
                Reply::ok(&out)
            }
            ["get", objects @ .., "--ignore-not-found", "-o", "name"] => {
                let mut out = String::new();
                for o in objects {
                    let Some((kind, name)) = admission_object(o) else {
                        return unexpected(&format!("get of {o}"));
                    };
                    if self
                        .live
                        .contains_key(&(kind.to_string(), String::new(), name.to_string()))
                    {
                        out.push_str(&format!(
                            "{}.admissionregistration.k8s.io/{name}\n",
                            kind.to_ascii_lowercase()
                        ));
                    }
                }
                Reply::ok(&out)
            }
            _ => unexpected(&format!("call {rest:?}")),
        }
    }

    /// Delete a ValidatingAdmissionPolicy or its binding; whether it existed.
    pub fn delete_admission_object(&mut self, kind: &str, name: &str) -> bool {
        let existed = self
            .live
            .remove(&(kind.to_string(), String::new(), name.to_string()))
            .is_some();
        if kind == "ValidatingAdmissionPolicyBinding" {
            if let Some(p) = self.policies.get_mut(name) {
                p.bound = false;
            }
        } else {
            self.policies.remove(name);
        }
        existed
    }

    /// An Update (`kubectl annotate`): a changed or added field is the updater's alone; a
    /// removed one leaves every manager's set \[A30].
    pub fn update_annotation(&mut self, manager: &str, key: &str, value: Option<&str>) {
        let Some(tcp) = &mut self.tcp else { return };
        match value {
            Some(v) => {
                if tcp.annotations.get(key).map(String::as_str) != Some(v) {
                    tcp.annotations.insert(key.to_string(), v.to_string());
                    tcp.owners.insert(
                        key.to_string(),
                        std::collections::BTreeSet::from([manager.to_string()]),
                    );
                }
            }
            None => {
                tcp.annotations.remove(key);
                tcp.owners.remove(key);
            }
        }
    }
}
