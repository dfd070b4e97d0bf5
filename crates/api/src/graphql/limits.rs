//! What a GraphQL document may ask for, checked before anything runs
//! (docs/security.md, "Documents are priced before they run").
//!
//! Depth alone does not bound a document's work: four nested lists of 100
//! are 10^8 articles in 230 bytes, and a fragment spreading the next one
//! twice, twenty times over, expands to a million fields. So
//! [`Guard::check`] bounds, each step the cost of the next: the text (bytes,
//! then tokens and nesting in one lexer pass), the syntax tree as written
//! (operations, fragments, spreads, aliases), then the selected operation's
//! root fields and **cost**, with each fragment priced once however often
//! it is spread. A refused document never reaches async-graphql's
//! validator (some of whose rules are quadratic), the executor or Redis.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::parser::types::{
    BaseType, DocumentOperations, ExecutableDocument, Field, FieldDefinition, OperationDefinition,
    OperationType, Selection, SelectionSet, Type, TypeKind, TypeSystemDefinition,
};
use async_graphql::{Name, Positioned, Value, Variables};
use async_graphql_value::Value as DocValue;

use super::documents::DocumentCache;
use super::shape;
use crate::error::{AppError, AppResult};

/// The limits of one document, each a flag of its own.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct DocumentLimits {
    /// Most objects a query may return (each list counts its pageSize or limit).
    #[arg(long, env = "VOTEGRAPH_MAX_QUERY_COST", default_value_t = 10_000)]
    pub max_query_cost: u64,

    /// Longest GraphQL document, in bytes.
    #[arg(long, env = "VOTEGRAPH_MAX_QUERY_BYTES", default_value_t = 32 * 1024)]
    pub max_query_bytes: usize,

    /// Most tokens in a document (GraphiQL's introspection query has 150).
    #[arg(long, env = "VOTEGRAPH_MAX_QUERY_TOKENS", default_value_t = 5_000)]
    pub max_query_tokens: usize,

    /// Most aliases in a document.
    #[arg(long, env = "VOTEGRAPH_MAX_ALIASES", default_value_t = 50)]
    pub max_aliases: usize,

    /// Most root fields in an operation (fragments expanded).
    #[arg(long, env = "VOTEGRAPH_MAX_ROOT_FIELDS", default_value_t = 50)]
    pub max_root_fields: usize,

    /// Most fragment definitions in a document.
    #[arg(long, env = "VOTEGRAPH_MAX_FRAGMENTS", default_value_t = 50)]
    pub max_fragments: usize,

    /// Most fragment spreads in a document, as written.
    #[arg(long, env = "VOTEGRAPH_MAX_FRAGMENT_SPREADS", default_value_t = 500)]
    pub max_fragment_spreads: usize,

    /// Most operations in a document.
    #[arg(long, env = "VOTEGRAPH_MAX_OPERATIONS", default_value_t = 10)]
    pub max_operations: usize,
}

#[derive(Clone)]
pub struct Checked {
    pub document: Arc<ExecutableDocument>,
    pub operation: OperationType,
    /// The operation's name (None: the document's only, anonymous one).
    pub name: Option<Name>,
    pub cost: u64,
}

/// Checks requests against the limits, with the cost model and the
/// parsed-document cache.
pub struct Guard {
    pub(crate) limits: DocumentLimits,
    model: CostModel,
    pub documents: DocumentCache,
}

impl Guard {
    /// `sdl` is the schema's SDL, from which the cost model is read.
    pub fn new(limits: DocumentLimits, sdl: &str) -> AppResult<Self> {
        Ok(Self {
            limits,
            model: CostModel::from_sdl(sdl)?,
            documents: DocumentCache::default(),
        })
    }

    /// Checks `request`; the parsed document comes back for execution
    /// (`None`: no operation can be selected, async-graphql says so).
    pub fn check(&self, request: &async_graphql::Request) -> AppResult<Option<Checked>> {
        check_variable_depth(&request.variables)?;
        let document = self.parsed(&request.query, true)?;
        let name = request.operation_name.as_deref();
        self.analyze(document, name, Some(&request.variables))
    }

    /// Checks a document ahead of any request (a trusted document): each
    /// of its operations, with every variable at its default. The parse is
    /// not kept: requests fill the cache with what they use.
    pub(crate) fn check_document(&self, query: &str) -> AppResult<()> {
        let document = self.parsed(query, false)?;
        for (name, _) in document.operations.iter() {
            self.analyze(document.clone(), name.map(Name::as_str), None)?;
        }
        Ok(())
    }

    /// The parsed document, within the byte, token and nesting limits;
    /// kept in the parsed-document cache when `keep`.
    fn parsed(&self, query: &str, keep: bool) -> AppResult<Arc<ExecutableDocument>> {
        let limits = &self.limits;
        if query.len() > limits.max_query_bytes {
            return Err(AppError::QueryTooComplex(format!(
                "the document is {} bytes long; at most {} are allowed",
                query.len(),
                limits.max_query_bytes
            )));
        }
        if let Some(document) = self.documents.get(query) {
            return Ok(document);
        }
        check_shape(query, limits)?;
        match keep {
            true => self.documents.parse(query),
            false => async_graphql::parser::parse_query(query).map(Arc::new),
        }
        .map_err(parse_error)
    }

    /// The syntax tree's counts, then the selected operation's variables
    /// (None: not given yet), root fields and cost; `None` when no
    /// operation can be selected.
    fn analyze(
        &self,
        document: Arc<ExecutableDocument>,
        operation_name: Option<&str>,
        variables: Option<&Variables>,
    ) -> AppResult<Option<Checked>> {
        let limits = &self.limits;
        let document_has = |count, what, max| at_most("the document", count, what, max);
        let operations = document.operations.iter().count();
        document_has(operations, "operations", limits.max_operations)?;
        document_has(document.fragments.len(), "fragments", limits.max_fragments)?;
        let (mut aliases, mut spreads) = (0, 0);
        for selection in selections(&document) {
            match selection {
                Selection::Field(field) if field.node.alias.is_some() => aliases += 1,
                Selection::FragmentSpread(_) => spreads += 1,
                _ => {}
            }
        }
        document_has(aliases, "aliases", limits.max_aliases)?;
        document_has(spreads, "fragment spreads", limits.max_fragment_spreads)?;

        let Some((name, operation)) = select_operation(&document, operation_name) else {
            return Ok(None);
        };
        let (operation, name) = (&operation.node, name.cloned());
        let defaults = Variables::default();
        if let Some(variables) = variables {
            check_variables(operation, variables)?;
        }
        let variables = variables.unwrap_or(&defaults);
        let root = match operation.ty {
            OperationType::Query => "Query",
            OperationType::Mutation => "Mutation",
            OperationType::Subscription => "Subscription",
        };
        let mut walk = Walk {
            model: &self.model,
            document: &document,
            operation,
            variables,
            fragments: HashMap::new(),
            visiting: Vec::new(),
        };
        let tally = walk.tally(&operation.selection_set.node, root)?;
        at_most(
            "the operation",
            tally.fields,
            "root fields",
            limits.max_root_fields,
        )?;
        if tally.cost > limits.max_query_cost {
            return Err(AppError::QueryTooComplex(format!(
                "the query costs {}, more than the limit of {}: each object counts 1 and each list its pageSize, limit, first or number of ids, times the count of its parent; ask for smaller pages or fewer nested lists",
                tally.cost, limits.max_query_cost
            )));
        }
        let (operation, cost) = (operation.ty, tally.cost);
        Ok(Some(Checked {
            document,
            operation,
            name,
            cost,
        }))
    }
}

/// Refuses a document with more than `max` of something.
fn at_most(subject: &str, count: usize, what: &str, max: usize) -> AppResult<()> {
    if count > max {
        return Err(AppError::QueryTooComplex(format!(
            "{subject} has {count} {what}; at most {max} are allowed"
        )));
    }
    Ok(())
}

/// Deepest nesting of list and object values and of list types: real
/// inputs nest two or three levels, and every walk over a value recurses.
pub(crate) const MAX_VALUE_DEPTH: usize = 32;

/// Deepest selection-set nesting the parser is given: its own limit is
/// checked only after recursing.
pub(crate) const MAX_SELECTION_DEPTH: usize = 64;

fn check_shape(query: &str, limits: &DocumentLimits) -> AppResult<()> {
    let bounds = shape::Shape {
        tokens: limits.max_query_tokens,
        selection_depth: MAX_SELECTION_DEPTH,
        value_depth: MAX_VALUE_DEPTH,
    };
    let found = shape::scan(query, &bounds);
    if found.tokens > bounds.tokens {
        return Err(AppError::QueryTooComplex(format!(
            "the document has more than {} tokens",
            limits.max_query_tokens
        )));
    }
    if found.value_depth > bounds.value_depth {
        return Err(AppError::QueryTooComplex(format!(
            "a value or type in the document is nested more than {MAX_VALUE_DEPTH} levels deep (lists and input objects); at most {MAX_VALUE_DEPTH} are allowed"
        )));
    }
    if found.selection_depth > bounds.selection_depth {
        return Err(AppError::QueryTooComplex(format!(
            "selection sets are nested more than {MAX_SELECTION_DEPTH} levels deep; at most {MAX_SELECTION_DEPTH} are allowed"
        )));
    }
    Ok(())
}

/// Refuses variables nested deeper than [`MAX_VALUE_DEPTH`], iteratively:
/// they reach the same recursive walks as the document's own values.
fn check_variable_depth(variables: &Variables) -> AppResult<()> {
    let mut pending: Vec<(&Value, usize)> = variables.values().map(|v| (v, 0)).collect();
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::List(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        if depth + 1 > MAX_VALUE_DEPTH {
            return Err(AppError::QueryTooComplex(format!(
                "a variable's value is nested more than {MAX_VALUE_DEPTH} levels deep (lists and objects); at most {MAX_VALUE_DEPTH} are allowed"
            )));
        }
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    Ok(())
}

/// The parser's error as a client should read it: of pest's report only
/// the last line (what was expected), the position going to `locations`.
fn parse_error(error: async_graphql::parser::Error) -> AppError {
    use async_graphql::parser::Error;
    let pos = error.positions().next();
    match error {
        Error::Syntax { message, .. } => {
            let expected = message
                .lines()
                .rev()
                .find_map(|line| line.trim_start().strip_prefix("= "))
                .unwrap_or(message.as_str())
                .trim()
                .replace('_', " ");
            let at = pos
                .map(|p| format!(" at line {}, column {}", p.line, p.column))
                .unwrap_or_default();
            AppError::Syntax {
                message: format!("syntax error{at}: {expected}"),
                pos,
            }
        }
        Error::RecursionLimitExceeded => {
            AppError::QueryTooComplex("the document is nested too deeply".to_owned())
        }
        other => AppError::InvalidDocument {
            message: other.to_string(),
            pos,
        },
    }
}

/// The operation a request runs, with its name: the named one, or the
/// only one (None: the document's only, anonymous operation).
pub(crate) fn select_operation<'a>(
    document: &'a ExecutableDocument,
    name: Option<&str>,
) -> Option<(Option<&'a Name>, &'a Positioned<OperationDefinition>)> {
    match (&document.operations, name) {
        (DocumentOperations::Single(op), _) => Some((None, op)),
        (DocumentOperations::Multiple(ops), Some(name)) => {
            ops.get_key_value(name).map(|(name, op)| (Some(name), op))
        }
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => {
            ops.iter().next().map(|(name, op)| (Some(name), op))
        }
        (DocumentOperations::Multiple(_), None) => None,
    }
}

/// Refuses variables the operation does not declare, and required ones
/// that are missing or null: a request error, where async-graphql would
/// notice only in the first resolver that reads one.
fn check_variables(operation: &OperationDefinition, variables: &Variables) -> AppResult<()> {
    for definition in &operation.variable_definitions {
        let definition = &definition.node;
        let ty = &definition.var_type.node;
        let missing = variables
            .get(&definition.name.node)
            .is_none_or(|v| matches!(v, Value::Null));
        if !ty.nullable && definition.default_value.is_none() && missing {
            return Err(AppError::VariableCoercion {
                message: format!(
                    "variable ${} of required type {ty} was not provided",
                    definition.name.node
                ),
                pos: Some(definition.name.pos),
            });
        }
    }
    for (name, _) in variables.iter() {
        let declared = operation
            .variable_definitions
            .iter()
            .any(|d| d.node.name.node == *name);
        if !declared {
            let mut shown: String = name.as_str().chars().take(64).collect();
            if shown.len() < name.len() {
                shown.push('…');
            }
            return Err(AppError::UndeclaredVariable(format!(
                "variable ${shown} is not declared by the operation"
            )));
        }
    }
    Ok(())
}

/// Every selection of `document` as written: its operations' and its
/// fragments', nested ones included. Iterative, as documents may nest
/// deeply.
pub(crate) fn selections(document: &ExecutableDocument) -> impl Iterator<Item = &Selection> {
    let operations = document.operations.iter();
    let mut pending: Vec<&Positioned<Selection>> = operations
        .map(|(_, op)| &op.node.selection_set)
        .chain(document.fragments.values().map(|f| &f.node.selection_set))
        .flat_map(|set| &set.node.items)
        .collect();
    std::iter::from_fn(move || {
        let selection = &pending.pop()?.node;
        match selection {
            Selection::Field(field) => pending.extend(&field.node.selection_set.node.items),
            Selection::InlineFragment(inline) => {
                pending.extend(&inline.node.selection_set.node.items)
            }
            // Every fragment's own selection is gone through above.
            Selection::FragmentSpread(_) => {}
        }
        Some(selection)
    })
}

/// One field of the schema, as far as cost is concerned.
#[derive(Debug, Clone)]
struct FieldCost {
    /// The named type it returns (lists unwrapped).
    type_name: String,
    list: Option<ListSize>,
    /// What one object costs: 1, but 0 for introspection objects outside
    /// a list (`type`, `ofType`…), or GraphiQL's 7-level `ofType` chain
    /// would cost more than the schema it describes.
    unit: u64,
}

#[derive(Debug, Clone)]
enum ListSize {
    /// Sized by an argument (`pageSize`, `limit`), with its default.
    Argument { name: String, default: u64 },
    /// As long as a list argument (`nodes(ids:)`).
    Length(String),
    /// A list without a size argument: a fixed estimate (introspection).
    Fixed(u64),
}

/// The schema's object types and their fields, from its SDL, plus the
/// introspection types; scalars and enums cost nothing of their own.
struct CostModel {
    types: HashMap<String, HashMap<String, FieldCost>>,
}

/// Arguments that size a list field.
const SIZE_ARGUMENTS: [&str; 3] = ["pageSize", "limit", "first"];

/// The type names of Relay connections (see [`CostModel::from_sdl`]).
const CONNECTION_SUFFIX: &str = "Connection";

/// Assumed length of a list with no size argument: none exists (a test
/// checks it), but a new one must not be free.
const UNSIZED_LIST: u64 = 100;

impl CostModel {
    fn from_sdl(sdl: &str) -> AppResult<Self> {
        let document = async_graphql::parser::parse_schema(sdl)
            .map_err(|e| AppError::Internal(format!("cost model: the SDL does not parse: {e}")))?;
        // The built-in scalars, which the SDL leaves out, and the
        // introspection types.
        let mut type_count = 5 + INTROSPECTION_TYPES;
        let (mut max_fields, mut max_args) = (1, INTROSPECTION_MAX_ARGS);
        let mut types = HashMap::new();
        for definition in &document.definitions {
            let TypeSystemDefinition::Type(ty) = definition else {
                continue;
            };
            let fields = match &ty.node.kind {
                TypeKind::Scalar | TypeKind::Enum(_) => {
                    type_count += 1;
                    continue;
                }
                TypeKind::Object(object) => &object.fields,
                TypeKind::Interface(interface) => &interface.fields,
                TypeKind::Union(_) | TypeKind::InputObject(_) => continue,
            };
            type_count += 1;
            max_fields = max_fields.max(fields.len() as u64);
            let owner = ty.node.name.node.as_str();
            let costs = fields
                .iter()
                .map(|field| {
                    let field = &field.node;
                    max_args = max_args.max(field.arguments.len() as u64);
                    (field.name.node.to_string(), field_cost(owner, field))
                })
                .collect();
            types.insert(owner.to_owned(), costs);
        }
        add_introspection(&mut types, type_count, max_fields, max_args);
        Ok(Self { types })
    }

    fn field(&self, type_name: &str, field: &str) -> Option<&FieldCost> {
        self.types.get(type_name)?.get(field)
    }
}

fn field_cost(owner: &str, field: &FieldDefinition) -> FieldCost {
    let (type_name, is_list) = unwrap_type(&field.ty.node);
    // A Relay connection (`feed(first:)`) is sized by its `first`, and its
    // `edges` count once inside it: a page of n edges costs n × an edge.
    let connection = owner.ends_with(CONNECTION_SUFFIX);
    let sized = is_list || type_name.ends_with(CONNECTION_SUFFIX);
    let list = sized.then(|| {
        if connection && field.name.node.as_str() == "edges" {
            return ListSize::Fixed(1);
        }
        field
            .arguments
            .iter()
            .find(|a| SIZE_ARGUMENTS.contains(&a.node.name.node.as_str()))
            .map(|a| ListSize::Argument {
                name: a.node.name.node.to_string(),
                default: a
                    .node
                    .default_value
                    .as_ref()
                    .and_then(|v| as_count(&v.node))
                    .unwrap_or(UNSIZED_LIST),
            })
            .or_else(|| {
                let listed = field
                    .arguments
                    .iter()
                    .find(|a| unwrap_type(&a.node.ty.node).1)?;
                Some(ListSize::Length(listed.node.name.node.to_string()))
            })
            .unwrap_or(ListSize::Fixed(UNSIZED_LIST))
    });
    FieldCost {
        type_name,
        list,
        unit: 1,
    }
}

/// The named type under any list and non-null wrappers, and whether a list
/// wraps it.
pub(super) fn unwrap_type(ty: &Type) -> (String, bool) {
    match &ty.base {
        BaseType::Named(name) => (name.to_string(), false),
        BaseType::List(inner) => (unwrap_type(inner).0, true),
    }
}

/// Introspection types, beside the schema's own.
const INTROSPECTION_TYPES: u64 = 8;
/// `__Type.fields(includeDeprecated)` and similar take at most one argument,
/// but directives take more: `@include(if)`, `@deprecated(reason)`…
const INTROSPECTION_MAX_ARGS: u64 = 2;
/// Built-in directives: include, skip, deprecated, specifiedBy, oneOf.
const DIRECTIVES: u64 = 5;
/// The longest introspection enum (`__DirectiveLocation`).
const MAX_ENUM_VALUES: u64 = 19;

/// The introspection fields, with the schema's own sizes as list
/// estimates: introspection costs what it really returns.
fn add_introspection(
    types: &mut HashMap<String, HashMap<String, FieldCost>>,
    type_count: u64,
    max_fields: u64,
    max_args: u64,
) {
    let object = |t: &str| FieldCost {
        type_name: t.to_owned(),
        list: None,
        unit: 0,
    };
    let list = |t: &str, n: u64| FieldCost {
        type_name: t.to_owned(),
        list: Some(ListSize::Fixed(n)),
        unit: 1,
    };
    let fields = [
        ("Query", "__schema", object("__Schema")),
        ("Query", "__type", object("__Type")),
        ("__Schema", "types", list("__Type", type_count)),
        ("__Schema", "queryType", object("__Type")),
        ("__Schema", "mutationType", object("__Type")),
        ("__Schema", "subscriptionType", object("__Type")),
        ("__Schema", "directives", list("__Directive", DIRECTIVES)),
        ("__Type", "fields", list("__Field", max_fields)),
        ("__Type", "interfaces", list("__Type", 1)),
        ("__Type", "possibleTypes", list("__Type", 1)),
        ("__Type", "enumValues", list("__EnumValue", MAX_ENUM_VALUES)),
        ("__Type", "inputFields", list("__InputValue", max_args)),
        ("__Type", "ofType", object("__Type")),
        ("__Field", "args", list("__InputValue", max_args)),
        ("__Field", "type", object("__Type")),
        ("__InputValue", "type", object("__Type")),
        ("__Directive", "args", list("__InputValue", max_args)),
    ];
    types.entry("__EnumValue".to_owned()).or_default();
    for (ty, name, cost) in fields {
        let entry = types.entry(ty.to_owned()).or_default();
        entry.insert(name.to_owned(), cost);
    }
}

/// An argument's value as the operation runs it: a literal, or a
/// variable's value (or its default), borrowed where it can be.
pub(crate) fn argument<'a>(
    arguments: &'a [(Positioned<Name>, Positioned<DocValue>)],
    name: &str,
    operation: &'a OperationDefinition,
    variables: &'a Variables,
) -> Option<Cow<'a, Value>> {
    let (_, value) = arguments.iter().find(|(n, _)| n.node == name)?;
    let DocValue::Variable(variable) = &value.node else {
        return value.node.clone().into_const().map(Cow::Owned);
    };
    if let Some(value) = variables.get(variable) {
        return Some(Cow::Borrowed(value));
    }
    let definitions = &operation.variable_definitions;
    let definition = definitions.iter().find(|d| d.node.name.node == *variable)?;
    Some(Cow::Borrowed(&definition.node.default_value.as_ref()?.node))
}

fn as_count(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i.max(0) as u64))
            .or_else(|| n.as_f64().map(|f| f.max(0.0) as u64)),
        _ => None,
    }
}

/// What a selection set holds: what it costs, and its fields (fragments
/// expanded), which at the root are the operation's root fields.
#[derive(Clone, Copy, Default)]
struct Tally {
    cost: u64,
    fields: usize,
}

struct Walk<'a> {
    model: &'a CostModel,
    document: &'a ExecutableDocument,
    operation: &'a OperationDefinition,
    variables: &'a Variables,
    /// Each fragment's tally, computed once however often it is spread.
    fragments: HashMap<Name, Tally>,
    /// Fragments being expanded, to refuse cycles before validation would.
    visiting: Vec<Name>,
}

impl Walk<'_> {
    /// The tally of one instance of `set` on an object of type `type_name`.
    fn tally(&mut self, set: &SelectionSet, type_name: &str) -> AppResult<Tally> {
        let mut total = Tally::default();
        for item in &set.items {
            let part = match &item.node {
                Selection::Field(field) => Tally {
                    cost: self.field_cost(&field.node, type_name)?,
                    fields: 1,
                },
                Selection::FragmentSpread(spread) => {
                    self.fragment(&spread.node.fragment_name.node)?
                }
                Selection::InlineFragment(inline) => {
                    let inline = &inline.node;
                    let on = inline
                        .type_condition
                        .as_ref()
                        .map(|c| c.node.on.node.to_string())
                        .unwrap_or_else(|| type_name.to_owned());
                    self.tally(&inline.selection_set.node, &on)?
                }
            };
            total.cost = total.cost.saturating_add(part.cost);
            total.fields = total.fields.saturating_add(part.fields);
        }
        Ok(total)
    }

    /// What `field` of an object of type `type_name` costs, its own
    /// selection included.
    fn field_cost(&mut self, field: &Field, type_name: &str) -> AppResult<u64> {
        let model = self.model;
        // None: `__typename`, or a field validation will refuse.
        let Some(info) = model.field(type_name, field.name.node.as_str()) else {
            return Ok(0);
        };
        if !model.types.contains_key(&info.type_name) {
            return Ok(0);
        }
        let count = match &info.list {
            None => 1,
            Some(ListSize::Fixed(n)) => *n,
            Some(ListSize::Argument { name, default }) => {
                argument(&field.arguments, name, self.operation, self.variables)
                    .and_then(|value| as_count(&value))
                    .unwrap_or(*default)
            }
            Some(ListSize::Length(name)) => self.list_length(field, name),
        };
        let inner = self.tally(&field.selection_set.node, &info.type_name)?;
        Ok(count.saturating_mul(inner.cost.saturating_add(info.unit)))
    }

    /// How many items `field`'s list argument `name` holds as the
    /// operation runs it.
    fn list_length(&self, field: &Field, name: &str) -> u64 {
        let written = field.arguments.iter().find(|(n, _)| n.node == name);
        // Written out, its items may be variables: count them as written.
        if let Some((_, DocValue::List(items))) = written.map(|(n, v)| (n, &v.node)) {
            return items.len() as u64;
        }
        match argument(&field.arguments, name, self.operation, self.variables).as_deref() {
            Some(Value::List(items)) => items.len() as u64,
            Some(Value::Null) | None => 0,
            // A single value stands for a list of one.
            Some(_) => 1,
        }
    }

    fn fragment(&mut self, name: &Name) -> AppResult<Tally> {
        if let Some(tally) = self.fragments.get(name) {
            return Ok(*tally);
        }
        let Some(fragment) = self.document.fragments.get(name) else {
            return Ok(Tally::default());
        };
        if self.visiting.contains(name) {
            return Err(AppError::QueryTooComplex(format!(
                "fragment {} spreads itself",
                name.as_str()
            )));
        }
        self.visiting.push(name.clone());
        let on = fragment.node.type_condition.node.on.node.to_string();
        let tally = self.tally(&fragment.node.selection_set.node, &on);
        self.visiting.pop();
        let tally = tally?;
        self.fragments.insert(name.clone(), tally);
        Ok(tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits' defaults, as the flags give them.
    fn defaults() -> DocumentLimits {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            documents: DocumentLimits,
        }
        Flags::parse_from(["votegraph"]).documents
    }

    fn guard() -> Guard {
        Guard::new(defaults(), &crate::graphql::sdl()).unwrap()
    }

    fn checked(query: &str, variables: Variables) -> AppResult<u64> {
        let request = async_graphql::Request::new(query).variables(variables);
        Ok(guard().check(&request)?.expect("parses").cost)
    }

    fn cost(query: &str) -> u64 {
        checked(query, Variables::default()).expect("within the limits")
    }

    fn rejected(query: &str) -> String {
        match checked(query, Variables::default()) {
            Err(AppError::QueryTooComplex(message)) => message,
            other => panic!("expected QUERY_TOO_COMPLEX for {query}: {other:?}"),
        }
    }

    const ALL_FIELDS: &str =
        "id title link poster { name karma rank } postedAt votes score groups downvotes myVote slug views";

    #[test]
    fn a_feed_costs_its_first_times_an_edge() {
        // edges (1 × (edge 1 + node 1 + poster 1)) + pageInfo 1 + the
        // connection 1, times `first`.
        assert_eq!(
            cost("{ feed(first: 10) { edges { node { id poster { name } } } pageInfo { hasNextPage } } }"),
            10 * (3 + 1 + 1)
        );
        assert_eq!(cost("{ feed { totalCount } }"), 25);
        assert_eq!(
            cost("{ feed(first: 10) { edges { node { poster { feed(first: 5) { totalCount } } } } } }"),
            10 * (1 + 1 + 1 + 5 + 1)
        );
        rejected("{ a: feed(first: 100) { edges { node { poster { feed(first: 100) { edges { node { id } } } } } } } }");
        // The moderation log and queue are priced as feeds.
        assert_eq!(
            cost(
                "{ modLog(first: 10) { edges { node { id moderator { name } article { id } } } } }"
            ),
            10 * (4 + 1)
        );
        assert_eq!(cost("{ moderationQueue { totalCount } }"), 25);
    }

    #[test]
    fn lists_multiply_through_nesting() {
        assert_eq!(cost("{ articleCount }"), 0);
        assert_eq!(cost("{ articles { id } }"), 25);
        assert_eq!(
            cost("{ articles(pageSize: 10) { id poster { name } } }"),
            20
        );
        assert_eq!(
            cost("{ articles(pageSize: 10) { poster { articles(pageSize: 5) { id } } } }"),
            10 * (1 + 1 + 5)
        );
        let vars = Variables::from_json(serde_json::json!({ "n": 7 }));
        assert_eq!(
            checked("query($n: Int!) { articles(pageSize: $n) { id } }", vars).unwrap(),
            7
        );
        assert_eq!(
            cost("query($n: Int = 3) { articles(pageSize: $n) { id } }"),
            3
        );
    }

    #[test]
    fn the_heaviest_legitimate_documents_pass() {
        let page = format!("{{ articles(pageSize: 100) {{ {ALL_FIELDS} }} }}");
        assert_eq!(cost(&page), 200);
        let top = format!(
            "{{ topPosters(limit: 100) {{ rank karma user {{ name karma rank articles {{ {ALL_FIELDS} }} }} }} }}"
        );
        let top_cost = cost(&top);
        assert_eq!(top_cost, 100 * (1 + 1 + 25 * 2));
        let introspection = include_str!("../../../../tests/api/introspection.graphql");
        let c = cost(introspection);
        assert!(c < defaults().max_query_cost / 2, "introspection costs {c}");
        assert!(c > 500, "introspection is not free: {c}");
    }

    #[test]
    fn the_attacks_are_refused() {
        let nest = |levels: usize| {
            let mut q = "id".to_owned();
            for _ in 0..levels {
                q = format!("articles(pageSize: 100) {{ poster {{ {q} }} }}");
            }
            format!("{{ {q} }}")
        };
        cost(&nest(1));
        let message = rejected(&nest(3));
        assert!(
            message.contains("costs 2020200") && message.contains("10000"),
            "{message}"
        );
        rejected(&nest(4));
        // `n` aliases of `field`.
        let aliased = |n, field: &str| {
            let aliases: String = (0..n).map(|i| format!("a{i}: {field} ")).collect();
            format!("{{ {aliases} }}")
        };
        let page = "articles(pageSize: 100) { id }";
        assert!(rejected(&aliased(500, page)).contains("tokens"));
        assert!(rejected(&aliased(300, page)).contains("300 aliases"));
        // Ten aliases pass the alias limit; their cost does not.
        let top = "topPosters(limit: 100) { user { articles(pageSize: 10) { id } } }";
        assert!(rejected(&aliased(10, top)).contains("costs 12000"));
        // The fragment bomb: B0 spreads B1 twice … B19 spreads B20 twice.
        let mut bomb = "{ articles(pageSize: 1) { ...B0 } }".to_owned();
        for i in 0..20 {
            bomb.push_str(&format!(
                " fragment B{i} on Article {{ poster {{ name }} ...B{} ...B{} }}",
                i + 1,
                i + 1
            ));
        }
        bomb.push_str(" fragment B20 on Article { id }");
        assert!(rejected(&bomb).contains("costs"));
        let cycle = "{ articles { ...A } } fragment A on Article { poster { articles { ...A } } }";
        assert!(rejected(cycle).contains("spreads itself"));
        let introspection_bomb = "{ __schema { types { fields { type { fields { type { fields { type { fields { name } } } } } } } } } }";
        rejected(introspection_bomb);
    }

    #[test]
    fn size_and_shape_limits() {
        let big = format!("{{ articleCount }} # {}", "x".repeat(40_000));
        assert!(rejected(&big).contains("bytes"));
        let many_tokens = format!("{{ {} }}", "articleCount ".repeat(6_000));
        assert!(many_tokens.len() < 32 * 1024 * 3);
        let limits = DocumentLimits {
            max_query_bytes: 1 << 20,
            ..defaults()
        };
        let g = Guard::new(limits, &crate::graphql::sdl()).unwrap();
        let err = g.check(&async_graphql::Request::new(many_tokens)).err();
        assert!(matches!(err, Some(AppError::QueryTooComplex(m)) if m.contains("tokens")));
        let roots = format!("{{ {} }}", "articleCount ".repeat(51));
        assert!(rejected(&roots).contains("51 root fields"));
        let ops: String = (0..11)
            .map(|i| format!("query Q{i} {{ articleCount }} "))
            .collect();
        let request = async_graphql::Request::new(ops).operation_name("Q1");
        assert!(
            matches!(guard().check(&request), Err(AppError::QueryTooComplex(m)) if m.contains("11 operations"))
        );
    }

    #[test]
    fn undeclared_variables_are_refused() {
        let vars = Variables::from_json(serde_json::json!({ "junk": "x".repeat(100) }));
        let request = async_graphql::Request::new("{ articleCount }").variables(vars);
        match guard().check(&request) {
            Err(AppError::UndeclaredVariable(m)) => assert!(m.contains("$junk"), "{m}"),
            other => panic!("{:?}", other.map(|c| c.map(|c| c.cost))),
        }
    }

    #[test]
    fn every_list_field_has_a_size() {
        let model = CostModel::from_sdl(&crate::graphql::sdl()).unwrap();
        for (ty, fields) in &model.types {
            for (name, field) in fields {
                let object = model.types.contains_key(&field.type_name);
                if let (true, Some(ListSize::Fixed(UNSIZED_LIST))) = (object, &field.list) {
                    panic!("{ty}.{name} is a list with no size or list argument");
                }
            }
        }
    }
}
