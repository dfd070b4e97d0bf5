//! An operation's meaning as text, so that requests that differ only in how
//! they are written share a shared subscription stream. Insignificant:
//! layout and comments, the order of arguments, input-object fields and
//! variables (sorted), and named fragments (expanded inline). Significant:
//! the fields, their order and aliases, directives, values and the name.
//! Past `max_bytes` there is no canonical form, which bounds expansion.

use std::fmt::Write as _;

use async_graphql::parser::types::{
    Directive, ExecutableDocument, OperationDefinition, Selection, SelectionSet,
};
use async_graphql::{Name, Positioned};
use async_graphql_value::Value;

/// Deepest nesting the print follows (the limits allow 64; only a fragment
/// cycle, which validation refuses, goes deeper).
const MAX_DEPTH: usize = 128;

/// The canonical print of `operation` in `document`, or None past
/// `max_bytes`.
pub fn operation(
    document: &ExecutableDocument,
    operation: &OperationDefinition,
    name: Option<&str>,
    max_bytes: usize,
) -> Option<String> {
    let mut printer = Printer {
        document,
        out: String::new(),
        max_bytes,
    };
    printer.operation(operation, name)?;
    Some(printer.out)
}

struct Printer<'a> {
    document: &'a ExecutableDocument,
    out: String,
    max_bytes: usize,
}

impl Printer<'_> {
    /// Stops the print once it is too long.
    fn check(&self) -> Option<()> {
        (self.out.len() <= self.max_bytes).then_some(())
    }

    fn operation(&mut self, op: &OperationDefinition, name: Option<&str>) -> Option<()> {
        let _ = write!(self.out, "{}", op.ty);
        if let Some(name) = name {
            let _ = write!(self.out, " {name}");
        }
        let mut variables: Vec<_> = op.variable_definitions.iter().map(|v| &v.node).collect();
        variables.sort_by(|a, b| a.name.node.cmp(&b.name.node));
        if !variables.is_empty() {
            self.out.push('(');
            for (i, variable) in variables.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(
                    self.out,
                    "${}:{}",
                    variable.name.node, variable.var_type.node
                );
                if let Some(default) = &variable.default_value {
                    self.out.push('=');
                    self.value(&default.node.clone().into_value())?;
                }
                self.directives(&variable.directives)?;
            }
            self.out.push(')');
        }
        self.directives(&op.directives)?;
        self.selection_set(&op.selection_set.node, 0)
    }

    fn selection_set(&mut self, set: &SelectionSet, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        if set.items.is_empty() {
            return Some(());
        }
        self.out.push('{');
        for (i, item) in set.items.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            match &item.node {
                Selection::Field(field) => {
                    let field = &field.node;
                    if let Some(alias) = &field.alias {
                        let _ = write!(self.out, "{}:", alias.node);
                    }
                    self.out.push_str(&field.name.node);
                    self.arguments(&field.arguments)?;
                    self.directives(&field.directives)?;
                    self.selection_set(&field.selection_set.node, depth + 1)?;
                }
                Selection::InlineFragment(inline) => {
                    let inline = &inline.node;
                    self.out.push_str("...");
                    if let Some(on) = &inline.type_condition {
                        let _ = write!(self.out, "on {}", on.node.on.node);
                    }
                    self.directives(&inline.directives)?;
                    self.selection_set(&inline.selection_set.node, depth + 1)?;
                }
                Selection::FragmentSpread(spread) => {
                    let spread = &spread.node;
                    // An unknown fragment is the validator's to report;
                    // such a request has no canonical form.
                    let fragment = &self
                        .document
                        .fragments
                        .get(&spread.fragment_name.node)?
                        .node;
                    let _ = write!(self.out, "...on {}", fragment.type_condition.node.on.node);
                    self.directives(&spread.directives)?;
                    self.directives(&fragment.directives)?;
                    self.selection_set(&fragment.selection_set.node, depth + 1)?;
                }
            }
            self.check()?;
        }
        self.out.push('}');
        self.check()
    }

    fn directives(&mut self, directives: &[Positioned<Directive>]) -> Option<()> {
        for directive in directives {
            let _ = write!(self.out, "@{}", directive.node.name.node);
            self.arguments(&directive.node.arguments)?;
        }
        self.check()
    }

    fn arguments(&mut self, arguments: &[(Positioned<Name>, Positioned<Value>)]) -> Option<()> {
        if arguments.is_empty() {
            return Some(());
        }
        let mut sorted: Vec<_> = arguments.iter().collect();
        sorted.sort_by(|a, b| a.0.node.cmp(&b.0.node));
        self.out.push('(');
        for (i, (name, value)) in sorted.into_iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{}:", name.node);
            self.value(&value.node)?;
        }
        self.out.push(')');
        self.check()
    }

    /// A value, input objects' fields sorted by name.
    fn value(&mut self, value: &Value) -> Option<()> {
        let mut value = value.clone();
        sort_fields(&mut value);
        let _ = write!(self.out, "{value}");
        self.check()
    }
}

/// Sorts every input object's fields by name. The document limits bound
/// how deeply values nest.
fn sort_fields(value: &mut Value) {
    match value {
        Value::List(items) => items.iter_mut().for_each(sort_fields),
        Value::Object(fields) => {
            fields.sort_keys();
            fields.values_mut().for_each(sort_fields);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print(text: &str) -> Option<String> {
        let document = async_graphql::parser::parse_query(text).unwrap();
        let (name, op) = document.operations.iter().next().unwrap();
        operation(&document, &op.node, name.map(|n| n.as_str()), 8 * 1024)
    }

    #[test]
    fn how_it_is_written_does_not_matter() {
        let plain = print("subscription { scoreChanged(group: \"rust\", limit: 2) { votes article { id title } } }");
        for variant in [
            "# a comment\nsubscription {\n  scoreChanged(limit: 2, group: \"rust\") { votes, article { id title } } # more\n}",
            "subscription{scoreChanged(group:\"rust\",limit:2){votes article{...A}}} fragment A on Article { id title }",
        ] {
            let printed = print(variant);
            assert!(printed.is_some());
            // A spread prints as an inline fragment: equal to the same
            // fields written inline, not to plain fields.
            if variant.contains("fragment") {
                assert_eq!(
                    printed,
                    print("subscription { scoreChanged(group: \"rust\", limit: 2) { votes article { ... on Article { id title } } } }")
                );
            } else {
                assert_eq!(printed, plain);
            }
        }
        let a = print("query($b: Int, $a: String = \"x\") { f(o: {y: 1, x: [1, 2]}) }");
        let b = print("query($a: String = \"x\" $b: Int) { f(o: {x: [1 2] y: 1}) }");
        assert_eq!(a, b);
    }

    #[test]
    fn what_changes_the_response_matters() {
        let base = print("subscription { scoreChanged { votes score } }");
        for different in [
            "subscription { scoreChanged { score votes } }",
            "subscription { scoreChanged { v: votes score } }",
            "subscription { scoreChanged(group: \"a\") { votes score } }",
            "subscription { scoreChanged { votes score @skip(if: true) } }",
            "subscription Named { scoreChanged { votes score } }",
        ] {
            assert_ne!(print(different), base, "{different}");
        }
        assert_ne!(print("{ f(s: \"a,b\") }"), print("{ f(s: \"a b\") }"));
    }

    #[test]
    fn the_print_is_bounded() {
        let document = async_graphql::parser::parse_query(
            "{ a ...F ...F ...F ...F } fragment F on Query { b c d e f g h }",
        )
        .unwrap();
        let (_, op) = document.operations.iter().next().unwrap();
        assert!(operation(&document, &op.node, None, 40).is_none());
        assert!(operation(&document, &op.node, None, 4096).is_some());
    }
}
