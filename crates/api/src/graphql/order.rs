//! Puts a response's object keys in document order, as the spec asks:
//! async-graphql inserts each field when it completes (async-graphql#612).
//! Each object's keys are collected from the selection sets that produced
//! it (fragments expanded, `@skip`/`@include` applied, first occurrence
//! first), and the map is rebuilt when out of order.

use async_graphql::indexmap::IndexMap;
use async_graphql::parser::types::{
    Directive, ExecutableDocument, OperationDefinition, Selection, SelectionSet,
};
use async_graphql::{Name, Positioned, Value, Variables};

use super::limits::argument;

pub(crate) fn in_document_order(
    data: &mut Value,
    document: &ExecutableDocument,
    operation: &OperationDefinition,
    variables: &Variables,
) {
    let walk = Walk {
        document,
        operation,
        variables,
    };
    walk.value(data, &[&operation.selection_set.node]);
}

struct Walk<'a> {
    document: &'a ExecutableDocument,
    operation: &'a OperationDefinition,
    variables: &'a Variables,
}

/// An object's response keys in order, each with the selection sets of
/// its fields (several when one key is selected more than once).
type Plan<'a> = Vec<(&'a Name, Vec<&'a SelectionSet>)>;

impl<'a> Walk<'a> {
    fn value(&self, value: &mut Value, sets: &[&'a SelectionSet]) {
        match value {
            Value::Object(map) => {
                let plan = self.plan(sets);
                self.object(map, &plan);
            }
            Value::List(items) => {
                // Items of one list come from the same selection sets.
                let mut plan = None;
                for item in items {
                    match item {
                        Value::Object(map) => {
                            let plan = plan.get_or_insert_with(|| self.plan(sets));
                            self.object(map, plan);
                        }
                        other @ Value::List(_) => self.value(other, sets),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    fn object(&self, map: &mut IndexMap<Name, Value>, plan: &Plan<'a>) {
        let in_order = map
            .keys()
            .zip(plan.iter().filter(|(key, _)| map.contains_key(*key)))
            .all(|(have, (want, _))| have == *want);
        if !in_order {
            let mut old = std::mem::take(map);
            map.reserve(old.len());
            for (key, _) in plan {
                if let Some(value) = old.swap_remove(*key) {
                    map.insert((*key).clone(), value);
                }
            }
            // Nothing should be left; if anything is, it keeps its place
            // at the end rather than being lost.
            map.extend(old);
        }
        for (key, sets) in plan {
            if sets.iter().any(|set| !set.items.is_empty()) {
                if let Some(value) = map.get_mut(*key) {
                    self.value(value, sets);
                }
            }
        }
    }

    fn plan(&self, sets: &[&'a SelectionSet]) -> Plan<'a> {
        let mut plan: Plan<'a> = Vec::new();
        let mut seen_fragments: Vec<&'a Name> = Vec::new();
        for set in sets {
            self.collect(set, &mut plan, &mut seen_fragments);
        }
        plan
    }

    fn collect(
        &self,
        set: &'a SelectionSet,
        plan: &mut Plan<'a>,
        seen_fragments: &mut Vec<&'a Name>,
    ) {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    let field = &field.node;
                    if self.skipped(&field.directives) {
                        continue;
                    }
                    let key = &field.response_key().node;
                    let sub = &field.selection_set.node;
                    match plan.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, sets)) => sets.push(sub),
                        None => plan.push((key, vec![sub])),
                    }
                }
                Selection::FragmentSpread(spread) => {
                    let spread = &spread.node;
                    let name = &spread.fragment_name.node;
                    // A fragment already collected here adds nothing new
                    // (and a cycle, refused by validation, cannot loop).
                    if self.skipped(&spread.directives) || seen_fragments.contains(&name) {
                        continue;
                    }
                    seen_fragments.push(name);
                    if let Some(fragment) = self.document.fragments.get(name) {
                        self.collect(&fragment.node.selection_set.node, plan, seen_fragments);
                    }
                }
                Selection::InlineFragment(inline) => {
                    let inline = &inline.node;
                    if !self.skipped(&inline.directives) {
                        self.collect(&inline.selection_set.node, plan, seen_fragments);
                    }
                }
            }
        }
    }

    /// Whether `@skip(if: true)` or `@include(if: false)` leaves the
    /// selection out (a literal, or a variable's value or default).
    fn skipped(&self, directives: &[Positioned<Directive>]) -> bool {
        directives.iter().any(|d| {
            let d = &d.node;
            let condition = argument(&d.arguments, "if", self.operation, self.variables);
            let condition = condition.as_deref();
            match d.name.node.as_str() {
                "skip" => condition == Some(&Value::Boolean(true)),
                "include" => condition == Some(&Value::Boolean(false)),
                _ => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ordered(query: &str, data: serde_json::Value, variables: serde_json::Value) -> String {
        let document = async_graphql::parser::parse_query(query).unwrap();
        let operation = match &document.operations {
            async_graphql::parser::types::DocumentOperations::Single(op) => op.node.clone(),
            _ => panic!("one operation"),
        };
        let mut data = Value::from_json(data).unwrap();
        in_document_order(
            &mut data,
            &document,
            &operation,
            &Variables::from_json(variables),
        );
        serde_json::to_string(&data).unwrap()
    }

    #[test]
    fn keys_follow_the_document_through_fragments_lists_and_directives() {
        let query = "query($no: Boolean = false) { b: articleCount a: articles { ...F id } c: __typename } \
                     fragment F on Article { title poster { name karma } hidden: id @include(if: $no) }";
        let data = serde_json::json!({
            "c": "Query",
            "a": [
                { "id": "1", "poster": { "karma": 1, "name": "x" }, "title": "t" },
                { "poster": { "karma": 2, "name": "y" }, "title": "u", "id": "2" },
            ],
            "b": 2,
        });
        assert_eq!(
            ordered(query, data, serde_json::json!({})),
            r#"{"b":2,"a":[{"title":"t","poster":{"name":"x","karma":1},"id":"1"},{"title":"u","poster":{"name":"y","karma":2},"id":"2"}],"c":"Query"}"#
        );
        // A key first written under a skipped field takes its place from
        // its next occurrence.
        let query =
            "query($s: Boolean!) { x: articleCount @skip(if: $s) y: articleCount x: articleCount }";
        let data = serde_json::json!({ "x": 1, "y": 1 });
        assert_eq!(
            ordered(query, data, serde_json::json!({ "s": true })),
            r#"{"y":1,"x":1}"#
        );
    }
}
