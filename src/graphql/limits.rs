//! What a GraphQL document may ask for, checked before anything runs.
//!
//! Depth alone does not bound a document's work: four nested lists of 100
//! are 10^8 articles in 230 bytes, 500 aliases repeat one list 500 times,
//! and a fragment spreading the next one twice, twenty times over, expands
//! to a million fields in under a kilobyte. So every request passes
//! [`Guard::check`] before validation and execution, in this order, each
//! step bounding the cost of the next:
//!
//! 1. the text: bytes, then tokens (a lexer pass that stops at the limit),
//!    before the parser allocates anything;
//! 2. the syntax tree: operations, fragments, fragment spreads and aliases,
//!    counted as written (not expanded);
//! 3. the selected operation: its root fields and its **cost**, with every
//!    fragment expanded. Cost is the number of objects the response can
//!    hold (GitHub's node limit): an object field costs 1, a list field its
//!    `pageSize`/`limit` argument (or its default), and both are multiplied
//!    by the count of their parent. A fragment's cost is computed once and
//!    multiplied, so a fragment bomb is priced in microseconds, not
//!    expanded;
//! 4. the variables: one the operation does not declare is refused, so
//!    junk cannot ride along (or become part of a response-cache key).
//!
//! A rejected document never reaches async-graphql's validator (some of
//! whose rules are quadratic in the number of fields), the executor, or
//! Redis.

use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::parser::types::{
    BaseType, DocumentOperations, ExecutableDocument, FieldDefinition, OperationDefinition,
    OperationType, Selection, SelectionSet, ServiceDocument, Type, TypeKind, TypeSystemDefinition,
};
use async_graphql::{Name, Positioned, Value, Variables};
use async_graphql_value::Value as DocValue;

use super::documents::{DocumentCache, DocumentStats};
use super::shape;
use crate::error::{AppError, AppResult};

/// The limits of one document; each one is a setting (see `config.rs`).
#[derive(Debug, Clone, Copy)]
pub struct DocumentLimits {
    pub max_bytes: usize,
    pub max_tokens: usize,
    pub max_cost: u64,
    pub max_aliases: usize,
    pub max_root_fields: usize,
    pub max_fragments: usize,
    pub max_spreads: usize,
    pub max_operations: usize,
}

impl Default for DocumentLimits {
    fn default() -> Self {
        Self {
            max_bytes: 32 * 1024,
            max_tokens: 5_000,
            max_cost: 10_000,
            max_aliases: 50,
            max_root_fields: 50,
            max_fragments: 50,
            max_spreads: 500,
            max_operations: 10,
        }
    }
}

/// A request that passed every limit.
#[derive(Clone)]
pub struct Checked {
    pub document: Arc<ExecutableDocument>,
    pub operation: OperationType,
    pub cost: u64,
}

/// Checks requests against the limits, with the schema's cost model and
/// the parsed-document cache.
pub struct Guard {
    limits: DocumentLimits,
    model: CostModel,
    documents: DocumentCache,
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

    pub fn limits(&self) -> &DocumentLimits {
        &self.limits
    }

    /// The parsed-document cache's size, for `/health`.
    pub fn document_stats(&self) -> DocumentStats {
        self.documents.stats()
    }

    /// Checks `request`; the parsed document comes back for execution
    /// (`None` when no operation can be selected: async-graphql reports
    /// that itself). A document that does not parse is refused here with a
    /// readable message and its position (see [`parse_error`]).
    pub fn check(&self, request: &async_graphql::Request) -> AppResult<Option<Checked>> {
        let query = request.query.as_str();
        let limits = &self.limits;
        if query.len() > limits.max_bytes {
            return Err(too_complex(format!(
                "the document is {} bytes long; at most {} are allowed",
                query.len(),
                limits.max_bytes
            )));
        }
        check_variable_depth(&request.variables)?;
        let document = match self.documents.get(query) {
            Some(document) => document,
            None => {
                check_shape(query, limits)?;
                self.documents.parse(query).map_err(parse_error)?
            }
        };
        let operation = self.analyze(
            &document,
            request.operation_name.as_deref(),
            &request.variables,
        )?;
        Ok(operation.map(|(operation, cost)| Checked {
            document,
            operation,
            cost,
        }))
    }

    /// Steps 2 to 4 of the module doc. `None` when the operation cannot be
    /// selected (async-graphql reports that itself).
    fn analyze(
        &self,
        document: &ExecutableDocument,
        operation_name: Option<&str>,
        variables: &Variables,
    ) -> AppResult<Option<(OperationType, u64)>> {
        let limits = &self.limits;
        let operations = document.operations.iter().count();
        if operations > limits.max_operations {
            return Err(too_complex(format!(
                "the document has {operations} operations; at most {} are allowed",
                limits.max_operations
            )));
        }
        if document.fragments.len() > limits.max_fragments {
            return Err(too_complex(format!(
                "the document has {} fragments; at most {} are allowed",
                document.fragments.len(),
                limits.max_fragments
            )));
        }
        let mut counts = SyntaxCounts::default();
        for (_, op) in document.operations.iter() {
            counts.selection_set(&op.node.selection_set.node);
        }
        for fragment in document.fragments.values() {
            counts.selection_set(&fragment.node.selection_set.node);
        }
        if counts.aliases > limits.max_aliases {
            return Err(too_complex(format!(
                "the document has {} aliases; at most {} are allowed",
                counts.aliases, limits.max_aliases
            )));
        }
        if counts.spreads > limits.max_spreads {
            return Err(too_complex(format!(
                "the document has {} fragment spreads; at most {} are allowed",
                counts.spreads, limits.max_spreads
            )));
        }

        let Some(operation) = select_operation(document, operation_name) else {
            return Ok(None);
        };
        let operation = &operation.node;
        check_variables(operation, variables)?;
        let root = match operation.ty {
            OperationType::Query => self.model.query.as_str(),
            OperationType::Mutation => self.model.mutation.as_str(),
            OperationType::Subscription => self.model.subscription.as_str(),
        };
        let mut walk = Walk {
            model: &self.model,
            document,
            operation,
            variables,
            fragment_costs: HashMap::new(),
            fragment_fields: HashMap::new(),
            visiting: Vec::new(),
        };
        let root_fields = walk.root_fields(&operation.selection_set.node)?;
        if root_fields > limits.max_root_fields as u64 {
            return Err(too_complex(format!(
                "the operation has {root_fields} root fields; at most {} are allowed",
                limits.max_root_fields
            )));
        }
        let cost = walk.cost(&operation.selection_set.node, root)?;
        if cost > limits.max_cost {
            return Err(too_complex(format!(
                "the query costs {cost}, more than the limit of {}: each object counts 1 and each list its pageSize or limit, times the count of its parent; ask for smaller pages or fewer nested lists",
                limits.max_cost
            )));
        }
        Ok(Some((operation.ty, cost)))
    }
}

/// Deepest nesting of list and object values (arguments, variables and
/// their defaults, directive arguments) and of list types. Real inputs
/// nest two or three levels; the bound keeps every recursive walk over a
/// value (parser, validator, coercion, drop) a few dozen frames deep.
pub const MAX_VALUE_DEPTH: usize = 32;

/// Deepest selection-set nesting the parser is given: its own limit. The
/// validator's field-depth limit (see [`crate::graphql`]) then reports a
/// too-deep query in terms of fields; this bound only keeps the parse
/// itself (which recurses before the parser's check) from going deeper.
pub const MAX_SELECTION_DEPTH: usize = 64;

/// Refuses a text with too many tokens or too deep a nesting, from one
/// lexer pass (see [`shape`]), before the parser allocates or recurses.
fn check_shape(query: &str, limits: &DocumentLimits) -> AppResult<()> {
    let bounds = shape::Bounds {
        tokens: limits.max_tokens,
        selection_depth: MAX_SELECTION_DEPTH,
        value_depth: MAX_VALUE_DEPTH,
    };
    let found = shape::scan(query, &bounds);
    if found.tokens > bounds.tokens {
        return Err(too_complex(format!(
            "the document has more than {} tokens",
            limits.max_tokens
        )));
    }
    if found.value_depth > bounds.value_depth {
        return Err(too_complex(format!(
            "a value or type in the document is nested more than {MAX_VALUE_DEPTH} levels deep (lists and input objects); at most {MAX_VALUE_DEPTH} are allowed"
        )));
    }
    if found.selection_depth > bounds.selection_depth {
        return Err(too_complex(format!(
            "selection sets are nested more than {MAX_SELECTION_DEPTH} levels deep; at most {MAX_SELECTION_DEPTH} are allowed"
        )));
    }
    Ok(())
}

/// Refuses variables nested deeper than [`MAX_VALUE_DEPTH`]: they reach
/// the same recursive walks as the document's own values. Iterative, so
/// the check itself has no depth to fear.
fn check_variable_depth(variables: &Variables) -> AppResult<()> {
    let mut pending: Vec<(&Value, usize)> = variables.values().map(|v| (v, 0)).collect();
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::List(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        if depth + 1 > MAX_VALUE_DEPTH {
            return Err(too_complex(format!(
                "a variable's value is nested more than {MAX_VALUE_DEPTH} levels deep (lists and objects); at most {MAX_VALUE_DEPTH} are allowed"
            )));
        }
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    Ok(())
}

fn too_complex(message: String) -> AppError {
    AppError::QueryTooComplex(message)
}

/// The parser's error as a client should read it. A syntax error's own
/// message is pest's report, which quotes the document with an ASCII
/// arrow (` --> 1:17 | … ^---`); only its last line, what was expected, is
/// kept, and the position goes to `locations`.
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
            too_complex("the document is nested too deeply".to_owned())
        }
        other => AppError::InvalidDocument {
            message: other.to_string(),
            pos,
        },
    }
}

/// The name of the operation a request runs: None for a document's only,
/// anonymous operation.
pub fn operation_name(document: &ExecutableDocument, requested: Option<&str>) -> Option<Name> {
    match (&document.operations, requested) {
        (DocumentOperations::Single(_), _) => None,
        (DocumentOperations::Multiple(ops), Some(requested)) => {
            ops.keys().find(|n| n.as_str() == requested).cloned()
        }
        (DocumentOperations::Multiple(ops), None) => ops.keys().next().cloned(),
    }
}

/// The operation a request runs: the named one, or the only one.
pub(crate) fn select_operation<'a>(
    document: &'a ExecutableDocument,
    name: Option<&str>,
) -> Option<&'a Positioned<OperationDefinition>> {
    match (&document.operations, name) {
        (DocumentOperations::Single(op), _) => Some(op),
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => ops.values().next(),
        (DocumentOperations::Multiple(_), None) => None,
    }
}

/// Refuses variables the operation does not declare, and required ones
/// (non-null, no default) that are missing or null: coercing the variables
/// comes before execution, so that is a request error (async-graphql would
/// only notice inside the first resolver that reads one).
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

/// Aliases and spreads as written in the document.
#[derive(Default)]
struct SyntaxCounts {
    aliases: usize,
    spreads: usize,
}

impl SyntaxCounts {
    fn selection_set(&mut self, set: &SelectionSet) {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    if field.node.alias.is_some() {
                        self.aliases += 1;
                    }
                    self.selection_set(&field.node.selection_set.node);
                }
                Selection::FragmentSpread(_) => self.spreads += 1,
                Selection::InlineFragment(inline) => {
                    self.selection_set(&inline.node.selection_set.node)
                }
            }
        }
    }
}

/// One field of the schema, as far as cost is concerned.
#[derive(Debug, Clone)]
struct FieldCost {
    /// The named type it returns (lists unwrapped).
    type_name: String,
    /// Leaves (scalars, enums, lists of them) cost nothing of their own.
    leaf: bool,
    list: Option<ListSize>,
    /// What one object costs: 1, but 0 for the introspection objects that
    /// are not in a list (`type`, `ofType`…), which are static and small;
    /// GraphiQL's 7-level `ofType` chain would otherwise cost more than the
    /// schema it describes.
    unit: u64,
}

#[derive(Debug, Clone)]
enum ListSize {
    /// Sized by an argument (`pageSize`, `limit`), with its default.
    Argument { name: String, default: u64 },
    /// A list without a size argument: a fixed estimate (introspection).
    Fixed(u64),
}

/// The schema's fields by type, read from its SDL once at start-up, plus
/// the introspection types (which the SDL leaves out).
struct CostModel {
    types: HashMap<String, HashMap<String, FieldCost>>,
    query: String,
    mutation: String,
    subscription: String,
}

/// Arguments that size a list field.
const SIZE_ARGUMENTS: [&str; 3] = ["pageSize", "limit", "first"];

/// The type names of Relay connections (see [`CostModel::from_sdl`]).
const CONNECTION_SUFFIX: &str = "Connection";

/// Assumed length of a list with no size argument and no estimate. No such
/// field exists in the schema today (a unit test checks it); the number
/// only keeps a future one from being free.
const UNSIZED_LIST: u64 = 100;

impl CostModel {
    fn from_sdl(sdl: &str) -> AppResult<Self> {
        let document = async_graphql::parser::parse_schema(sdl)
            .map_err(|e| AppError::Internal(format!("cost model: the SDL does not parse: {e}")))?;
        let sdl = SdlTypes::read(&document);
        let type_count = sdl.objects.len() as u64 + sdl.leaves.len() as u64 + INTROSPECTION_TYPES;
        let max_fields = sdl
            .objects
            .iter()
            .map(|(_, fields)| fields.len() as u64)
            .max()
            .unwrap_or(1);
        let max_args = sdl
            .objects
            .iter()
            .flat_map(|(_, fields)| fields.iter().map(|f| f.node.arguments.len() as u64))
            .max()
            .unwrap_or(1)
            .max(INTROSPECTION_MAX_ARGS);
        let mut types: HashMap<String, HashMap<String, FieldCost>> = HashMap::new();
        for (name, fields) in &sdl.objects {
            let costs = fields
                .iter()
                .map(|field| {
                    let field = &field.node;
                    let cost = field_cost(name, field, &sdl.leaves);
                    (field.name.node.to_string(), cost)
                })
                .collect();
            types.insert(name.clone(), costs);
        }
        let [query, mutation, subscription] = sdl.roots;
        add_introspection(&mut types, &query, type_count, max_fields, max_args);
        Ok(Self {
            types,
            query,
            mutation,
            subscription,
        })
    }

    fn field(&self, type_name: &str, field: &str) -> Option<&FieldCost> {
        self.types.get(type_name)?.get(field)
    }
}

/// What a schema's SDL defines, as the cost model reads it.
struct SdlTypes<'a> {
    /// The query, mutation and subscription roots' type names.
    roots: [String; 3],
    /// Scalars and enums: fields of these types cost their own unit only.
    leaves: Vec<String>,
    /// Objects and interfaces with their fields.
    objects: Vec<(String, &'a Vec<Positioned<FieldDefinition>>)>,
}

impl<'a> SdlTypes<'a> {
    fn read(document: &'a ServiceDocument) -> Self {
        let mut sdl = Self {
            roots: ["Query", "Mutation", "Subscription"].map(str::to_owned),
            leaves: ["String", "Int", "Float", "Boolean", "ID"]
                .map(str::to_owned)
                .to_vec(),
            objects: Vec::new(),
        };
        for definition in &document.definitions {
            match definition {
                TypeSystemDefinition::Schema(schema) => {
                    let s = &schema.node;
                    let roots = [&s.query, &s.mutation, &s.subscription];
                    for (root, named) in sdl.roots.iter_mut().zip(roots) {
                        if let Some(named) = named {
                            *root = named.node.to_string();
                        }
                    }
                }
                TypeSystemDefinition::Type(ty) => {
                    let name = ty.node.name.node.to_string();
                    match &ty.node.kind {
                        TypeKind::Scalar | TypeKind::Enum(_) => sdl.leaves.push(name),
                        TypeKind::Object(object) => sdl.objects.push((name, &object.fields)),
                        TypeKind::Interface(i) => sdl.objects.push((name, &i.fields)),
                        TypeKind::Union(_) | TypeKind::InputObject(_) => {}
                    }
                }
                TypeSystemDefinition::Directive(_) => {}
            }
        }
        sdl
    }
}

/// The cost of `field` of the type `owner`.
fn field_cost(owner: &str, field: &FieldDefinition, leaves: &[String]) -> FieldCost {
    let (type_name, is_list) = unwrap_type(&field.ty.node);
    let leaf = leaves.contains(&type_name);
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
            .unwrap_or(ListSize::Fixed(UNSIZED_LIST))
    });
    FieldCost {
        type_name,
        leaf,
        list,
        unit: 1,
    }
}

/// The named type under any list and non-null wrappers, and whether a list
/// wraps it.
fn unwrap_type(ty: &Type) -> (String, bool) {
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

/// The introspection fields, with the schema's own sizes as list estimates,
/// so that GraphiQL's introspection query costs what it really returns and
/// a nested `fields { type { fields … } }` abuse costs what it would.
fn add_introspection(
    types: &mut HashMap<String, HashMap<String, FieldCost>>,
    query: &str,
    type_count: u64,
    max_fields: u64,
    max_args: u64,
) {
    let object = |t: &str| FieldCost {
        type_name: t.to_owned(),
        leaf: false,
        list: None,
        unit: 0,
    };
    let list = |t: &str, n: u64| FieldCost {
        type_name: t.to_owned(),
        leaf: false,
        list: Some(ListSize::Fixed(n)),
        unit: 1,
    };
    let mut add = |ty: &str, fields: Vec<(&str, FieldCost)>| {
        let entry = types.entry(ty.to_owned()).or_default();
        for (name, cost) in fields {
            entry.insert(name.to_owned(), cost);
        }
    };
    add(
        query,
        vec![
            ("__schema", object("__Schema")),
            ("__type", object("__Type")),
        ],
    );
    add(
        "__Schema",
        vec![
            ("types", list("__Type", type_count)),
            ("queryType", object("__Type")),
            ("mutationType", object("__Type")),
            ("subscriptionType", object("__Type")),
            ("directives", list("__Directive", DIRECTIVES)),
        ],
    );
    add(
        "__Type",
        vec![
            ("fields", list("__Field", max_fields)),
            ("interfaces", list("__Type", 1)),
            ("possibleTypes", list("__Type", 1)),
            ("enumValues", list("__EnumValue", MAX_ENUM_VALUES)),
            ("inputFields", list("__InputValue", max_args)),
            ("ofType", object("__Type")),
        ],
    );
    add(
        "__Field",
        vec![
            ("args", list("__InputValue", max_args)),
            ("type", object("__Type")),
        ],
    );
    add("__InputValue", vec![("type", object("__Type"))]);
    add(
        "__Directive",
        vec![("args", list("__InputValue", max_args))],
    );
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

/// One cost computation over one operation.
struct Walk<'a> {
    model: &'a CostModel,
    document: &'a ExecutableDocument,
    operation: &'a OperationDefinition,
    variables: &'a Variables,
    /// Cost of one instance of each fragment's selection set.
    fragment_costs: HashMap<Name, u64>,
    /// Fields each fragment contributes where it is spread.
    fragment_fields: HashMap<Name, u64>,
    /// Fragments being expanded, to refuse cycles (which validation would
    /// refuse too, but only after this walk).
    visiting: Vec<Name>,
}

impl Walk<'_> {
    /// Cost of one instance of `set` on an object of type `type_name`.
    fn cost(&mut self, set: &SelectionSet, type_name: &str) -> AppResult<u64> {
        let mut total: u64 = 0;
        for item in &set.items {
            let cost = match &item.node {
                Selection::Field(field) => {
                    let field = &field.node;
                    let Some(info) = self.model.field(type_name, field.name.node.as_str()) else {
                        // `__typename`, or a field validation will refuse.
                        continue;
                    };
                    if info.leaf {
                        continue;
                    }
                    let count = match &info.list {
                        None => 1,
                        Some(ListSize::Fixed(n)) => *n,
                        Some(ListSize::Argument { name, default }) => {
                            self.argument_count(field, name).unwrap_or(*default)
                        }
                    };
                    let (info_type, unit) = (info.type_name.clone(), info.unit);
                    let inner = self.cost(&field.selection_set.node, &info_type)?;
                    count.saturating_mul(inner.saturating_add(unit))
                }
                Selection::FragmentSpread(spread) => {
                    let name = &spread.node.fragment_name.node;
                    self.fragment_cost(name)?
                }
                Selection::InlineFragment(inline) => {
                    let inline = &inline.node;
                    let on = inline
                        .type_condition
                        .as_ref()
                        .map(|c| c.node.on.node.to_string())
                        .unwrap_or_else(|| type_name.to_owned());
                    self.cost(&inline.selection_set.node, &on)?
                }
            };
            total = total.saturating_add(cost);
        }
        Ok(total)
    }

    fn fragment_cost(&mut self, name: &Name) -> AppResult<u64> {
        if let Some(cost) = self.fragment_costs.get(name) {
            return Ok(*cost);
        }
        let Some(fragment) = self.document.fragments.get(name) else {
            return Ok(0);
        };
        self.enter(name)?;
        let on = fragment.node.type_condition.node.on.node.to_string();
        let cost = self.cost(&fragment.node.selection_set.node, &on);
        self.visiting.pop();
        let cost = cost?;
        self.fragment_costs.insert(name.clone(), cost);
        Ok(cost)
    }

    fn enter(&mut self, name: &Name) -> AppResult<()> {
        if self.visiting.contains(name) {
            return Err(too_complex(format!(
                "fragment {} spreads itself",
                name.as_str()
            )));
        }
        self.visiting.push(name.clone());
        Ok(())
    }

    /// Fields selected at the root, through fragments.
    fn root_fields(&mut self, set: &SelectionSet) -> AppResult<u64> {
        let mut total: u64 = 0;
        for item in &set.items {
            let n = match &item.node {
                Selection::Field(_) => 1,
                Selection::InlineFragment(inline) => {
                    self.root_fields(&inline.node.selection_set.node)?
                }
                Selection::FragmentSpread(spread) => {
                    let name = &spread.node.fragment_name.node;
                    match self.fragment_fields.get(name) {
                        Some(n) => *n,
                        None => {
                            let Some(fragment) = self.document.fragments.get(name) else {
                                continue;
                            };
                            self.enter(name)?;
                            let n = self.root_fields(&fragment.node.selection_set.node);
                            self.visiting.pop();
                            let n = n?;
                            self.fragment_fields.insert(name.clone(), n);
                            n
                        }
                    }
                }
            };
            total = total.saturating_add(n);
        }
        Ok(total)
    }

    /// The value of a size argument: a literal, or a variable's value (or
    /// the variable's default).
    fn argument_count(
        &self,
        field: &async_graphql::parser::types::Field,
        name: &str,
    ) -> Option<u64> {
        let (_, value) = field.arguments.iter().find(|(n, _)| n.node == name)?;
        match &value.node {
            DocValue::Variable(var) => match self.variables.get(var) {
                Some(v) => as_count(v),
                None => self
                    .operation
                    .variable_definitions
                    .iter()
                    .find(|d| d.node.name.node == *var)
                    .and_then(|d| d.node.default_value.as_ref())
                    .and_then(|v| as_count(&v.node)),
            },
            DocValue::Number(n) => as_count(&Value::Number(n.clone())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard::new(DocumentLimits::default(), &crate::graphql::sdl()).unwrap()
    }

    fn cost(query: &str) -> AppResult<u64> {
        cost_with(query, Variables::default())
    }

    fn cost_with(query: &str, variables: Variables) -> AppResult<u64> {
        let request = async_graphql::Request::new(query).variables(variables);
        Ok(guard().check(&request)?.expect("parses").cost)
    }

    fn rejected(query: &str) -> String {
        match cost(query) {
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
            cost("{ feed(first: 10) { edges { node { id poster { name } } } pageInfo { hasNextPage } } }")
                .unwrap(),
            10 * (3 + 1 + 1)
        );
        assert_eq!(cost("{ feed { totalCount } }").unwrap(), 25);
        assert_eq!(
            cost("{ feed(first: 10) { edges { node { poster { feed(first: 5) { totalCount } } } } } }")
                .unwrap(),
            10 * (1 + 1 + 1 + 5 + 1)
        );
        rejected("{ a: feed(first: 100) { edges { node { poster { feed(first: 100) { edges { node { id } } } } } } } }");
        // The moderation log and queue are priced as feeds.
        assert_eq!(
            cost(
                "{ modLog(first: 10) { edges { node { id moderator { name } article { id } } } } }"
            )
            .unwrap(),
            10 * (4 + 1)
        );
        assert_eq!(cost("{ moderationQueue { totalCount } }").unwrap(), 25);
    }

    #[test]
    fn lists_multiply_through_nesting() {
        assert_eq!(cost("{ articleCount }").unwrap(), 0);
        assert_eq!(cost("{ articles { id } }").unwrap(), 25);
        assert_eq!(
            cost("{ articles(pageSize: 10) { id poster { name } } }").unwrap(),
            20
        );
        assert_eq!(
            cost("{ articles(pageSize: 10) { poster { articles(pageSize: 5) { id } } } }").unwrap(),
            10 * (1 + 1 + 5)
        );
        let vars = Variables::from_json(serde_json::json!({ "n": 7 }));
        assert_eq!(
            cost_with("query($n: Int!) { articles(pageSize: $n) { id } }", vars).unwrap(),
            7
        );
        assert_eq!(
            cost("query($n: Int = 3) { articles(pageSize: $n) { id } }").unwrap(),
            3
        );
    }

    #[test]
    fn the_heaviest_legitimate_documents_pass() {
        let page = format!("{{ articles(pageSize: 100) {{ {ALL_FIELDS} }} }}");
        assert_eq!(cost(&page).unwrap(), 200);
        let top = format!(
            "{{ topPosters(limit: 100) {{ rank karma user {{ name karma rank articles {{ {ALL_FIELDS} }} }} }} }}"
        );
        let top_cost = cost(&top).unwrap();
        assert_eq!(top_cost, 100 * (1 + 1 + 25 * 2));
        let introspection = include_str!("../../tests/api/introspection.graphql");
        let c = cost(introspection).unwrap();
        assert!(
            c < DocumentLimits::default().max_cost / 2,
            "introspection costs {c}"
        );
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
        assert!(cost(&nest(1)).is_ok());
        let message = rejected(&nest(3));
        assert!(
            message.contains("costs 2020200") && message.contains("10000"),
            "{message}"
        );
        rejected(&nest(4));
        let aliases: String = (0..500)
            .map(|i| format!("a{i}: articles(pageSize: 100) {{ id }} "))
            .collect();
        assert!(rejected(&format!("{{ {aliases} }}")).contains("tokens"));
        let aliases: String = (0..300)
            .map(|i| format!("a{i}: articles(pageSize: 100) {{ id }} "))
            .collect();
        assert!(rejected(&format!("{{ {aliases} }}")).contains("300 aliases"));
        // Ten aliases pass the alias limit; their cost does not.
        let aliases: String = (0..10)
            .map(|i| format!("a{i}: topPosters(limit: 100) {{ user {{ articles(pageSize: 10) {{ id }} }} }} "))
            .collect();
        assert!(rejected(&format!("{{ {aliases} }}")).contains("costs 12000"));
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
            max_bytes: 1 << 20,
            ..DocumentLimits::default()
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
                if let (false, Some(ListSize::Fixed(UNSIZED_LIST))) = (field.leaf, &field.list) {
                    panic!("{ty}.{name} is a list with no pageSize or limit argument");
                }
            }
        }
    }
}
