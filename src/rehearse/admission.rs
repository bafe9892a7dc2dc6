//! The API server's ValidatingAdmissionPolicies as the model evaluates them: the rendered
//! policy and its binding read into a [`Policy`], and one request judged by its match
//! constraints, match conditions and validations, the CEL evaluated by the `cel` crate
//! (assumption rows A11, A12 of `assumptions.md`).

use std::collections::BTreeMap;

use serde_json::Value;

/// A rendered admission policy with its binding's parameter.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The policy's name.
    pub name: String,
    /// The namespace its `namespaceSelector` names (`kubernetes.io/metadata.name`), if any.
    pub namespace: Option<String>,
    /// (API group, resource, operation) it matches.
    pub rules: Vec<(String, String, String)>,
    /// objectSelector: label key and the value it must have (`None`: must exist).
    pub labels: Vec<(String, Option<String>)>,
    /// `matchConditions` expressions.
    pub conditions: Vec<String>,
    /// `validations`: expression and message.
    pub validations: Vec<(String, String)>,
    /// The kind of its parameter (`paramKind.kind`), if it has one.
    pub param_kind: Option<String>,
    /// The binding's `paramRef.name` (`None` until the binding is applied).
    pub param: Option<String>,
    /// The binding's `parameterNotFoundAction: Deny`.
    pub deny_without_param: bool,
    /// `failurePolicy: Fail` (the default).
    pub fail_closed: bool,
    /// Whether a binding exists: a policy without one is not enforced.
    pub bound: bool,
}

/// One admission request.
pub struct Request<'a> {
    /// API group, resource (with subresource: `machines/status`), operation.
    pub group: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// `CREATE`, `UPDATE`…
    pub operation: &'a str,
    /// The object after the request.
    pub object: &'a Value,
    /// The object before (UPDATE), else `None`.
    pub old: Option<&'a Value>,
}

impl Policy {
    /// Read a rendered ValidatingAdmissionPolicy (the binding comes later, [`Policy::bind`]).
    pub fn from_object(o: &Value) -> Policy {
        let strings = |ptr: &str, key: &str| -> Vec<String> {
            o.pointer(ptr)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c[key].as_str().map(str::to_string))
                .collect()
        };
        let list = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        };
        let mut rules = Vec::new();
        for r in o
            .pointer("/spec/matchConstraints/resourceRules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for g in list(&r["apiGroups"]) {
                for res in list(&r["resources"]) {
                    for op in list(&r["operations"]) {
                        rules.push((g.clone(), res.clone(), op));
                    }
                }
            }
        }
        let mut labels: Vec<(String, Option<String>)> = o
            .pointer("/spec/matchConstraints/objectSelector/matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
            .collect();
        for e in o
            .pointer("/spec/matchConstraints/objectSelector/matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // Only `Exists` is rendered; any other operator is read as `Exists` of the key
            // and noted by the caller's tests.
            labels.push((e["key"].as_str().unwrap_or_default().to_string(), None));
        }
        let validations = o
            .pointer("/spec/validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| {
                Some((
                    v["expression"].as_str()?.to_string(),
                    v["message"].as_str().unwrap_or("denied").to_string(),
                ))
            })
            .collect();
        Policy {
            name: o["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            namespace: o
                .pointer("/spec/matchConstraints/namespaceSelector/matchLabels/kubernetes.io~1metadata.name")
                .and_then(Value::as_str)
                .map(str::to_string),
            rules,
            labels,
            conditions: strings("/spec/matchConditions", "expression"),
            validations,
            param_kind: o
                .pointer("/spec/paramKind/kind")
                .and_then(Value::as_str)
                .map(str::to_string),
            param: None,
            deny_without_param: false,
            fail_closed: o.pointer("/spec/failurePolicy").and_then(Value::as_str) != Some("Ignore"),
            bound: false,
        }
    }

    /// Apply a ValidatingAdmissionPolicyBinding of this policy.
    pub fn bind(&mut self, binding: &Value) {
        self.param = binding
            .pointer("/spec/paramRef/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        self.deny_without_param = binding
            .pointer("/spec/paramRef/parameterNotFoundAction")
            .and_then(Value::as_str)
            == Some("Deny");
        self.bound = true;
    }

    /// Judge one request. `params` finds the parameter object by kind and name. `Err` holds
    /// the message the API server returns.
    pub fn judge(
        &self,
        req: &Request<'_>,
        params: &dyn Fn(&str, &str) -> Option<Value>,
    ) -> Result<(), String> {
        if !self.bound {
            return Ok(());
        }
        let matches_rule = self
            .rules
            .iter()
            .any(|(g, r, o)| g == req.group && r == req.resource && o == req.operation);
        if !matches_rule {
            return Ok(());
        }
        if let Some(ns) = &self.namespace {
            if req.object["metadata"]["namespace"].as_str() != Some(ns.as_str()) {
                return Ok(());
            }
        }
        let labels = &req.object["metadata"]["labels"];
        let selected = self.labels.iter().all(|(k, v)| match v {
            Some(v) => labels[k].as_str() == Some(v.as_str()),
            None => labels.get(k).is_some(),
        });
        if !selected {
            return Ok(());
        }
        let param = match (&self.param_kind, &self.param) {
            (Some(kind), Some(name)) => params(kind, name),
            _ => None,
        };
        let refused = |why: &str| Err(format!("{}: {why}", self.name));
        let eval = |expr: &str| -> Option<bool> {
            let program = cel::Program::compile(expr).ok()?;
            let mut cx = cel::Context::default();
            cx.add_variable("object", req.object.clone()).ok()?;
            cx.add_variable("oldObject", req.old.cloned().unwrap_or(Value::Null))
                .ok()?;
            cx.add_variable("params", param.clone().unwrap_or(Value::Null))
                .ok()?;
            match program.execute(&cx).ok()? {
                cel::Value::Bool(b) => Some(b),
                _ => None,
            }
        };
        for c in &self.conditions {
            match eval(c) {
                Some(true) => {}
                Some(false) => return Ok(()),
                None if self.fail_closed => return refused("a match condition failed to evaluate"),
                None => return Ok(()),
            }
        }
        if self.param_kind.is_some() && param.is_none() {
            if self.deny_without_param {
                return refused("no parameter object (parameterNotFoundAction: Deny)");
            }
            return Ok(());
        }
        for (v, message) in &self.validations {
            match eval(v) {
                Some(true) => {}
                Some(false) => return refused(message),
                None if self.fail_closed => return refused("a validation failed to evaluate"),
                None => {}
            }
        }
        Ok(())
    }
}

/// Every policy judges the request; the first refusal wins (the API server reports all of
/// them; the model keeps one message).
pub fn admit(
    policies: &BTreeMap<String, Policy>,
    req: &Request<'_>,
    params: &dyn Fn(&str, &str) -> Option<Value>,
) -> Result<(), String> {
    for p in policies.values() {
        p.judge(req, params)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> Policy {
        let mut p = Policy::from_object(&json!({
            "metadata": {"name": "p"},
            "spec": {
                "failurePolicy": "Fail",
                "paramKind": {"kind": "TalosControlPlane"},
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns"}},
                    "resourceRules": [{"apiGroups": ["cluster.x-k8s.io"], "resources": ["machines"], "operations": ["CREATE"]}]
                },
                "validations": [{"expression": "params.status.bootstrapped == true", "message": "not bootstrapped"}]
            }
        }));
        p.bind(&json!({"spec": {"paramRef": {"name": "cp", "parameterNotFoundAction": "Deny"}}}));
        p
    }

    #[test]
    fn a_policy_refuses_by_its_validation_and_its_missing_parameter() {
        let p = policy();
        let m = json!({"metadata": {"namespace": "ns", "labels": {}}});
        let req = Request {
            group: "cluster.x-k8s.io",
            resource: "machines",
            operation: "CREATE",
            object: &m,
            old: None,
        };
        let yes = |_: &str, _: &str| Some(json!({"status": {"bootstrapped": true}}));
        let no = |_: &str, _: &str| Some(json!({"status": {"bootstrapped": false}}));
        let none = |_: &str, _: &str| None;
        assert_eq!(p.judge(&req, &yes), Ok(()));
        assert_eq!(p.judge(&req, &no), Err("p: not bootstrapped".into()));
        assert!(p.judge(&req, &none).unwrap_err().contains("Deny"));
        let other = json!({"metadata": {"namespace": "other"}});
        let req2 = Request {
            object: &other,
            ..req
        };
        assert_eq!(p.judge(&req2, &no), Ok(()), "another namespace");
    }

    #[test]
    fn an_unbound_policy_is_not_enforced() {
        let mut p = policy();
        p.bound = false;
        let m = json!({"metadata": {"namespace": "ns"}});
        let req = Request {
            group: "cluster.x-k8s.io",
            resource: "machines",
            operation: "CREATE",
            object: &m,
            old: None,
        };
        assert_eq!(p.judge(&req, &|_, _| None), Ok(()));
    }
}
