//! OpenAPI for the routes the layer covers (feature `openapi`): the `Idempotency-Key` header,
//! idemkey's problem responses and the `x-idempotency` rules, added to any application's
//! utoipa document.

use http::Method;
use idemkey_core::MAX_KEY_LEN;
use utoipa::Modify;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{
    Components, ContentBuilder, OpenApi, Ref, RefOr, Required, ResponseBuilder, Schema,
};

use crate::Config;

/// The name of the problem schema added to the document's components.
pub const PROBLEM_SCHEMA: &str = "IdempotencyProblem";

/// A key as the layer accepts it: 1-255 visible ASCII characters, bare or a quoted string.
const KEY_PATTERN: &str = "^([!#-~][!-~]{0,254}|\"([!#-\\[\\]-~]|\\\\[\"\\\\]){1,255}\")$";

/// The answers the layer gives on a covered route, whatever the handler does.
const PROBLEMS: [(&str, &str); 5] = [
    ("400", "key-missing or key-invalid"),
    (
        "409",
        "request-in-flight (with Retry-After): retry later with the same key",
    ),
    (
        "422",
        "key-reused: the key was used for a different request",
    ),
    (
        "500",
        "outcome-unknown, store-failed or previous-attempt-unknown",
    ),
    (
        "503",
        "store-unavailable (with Retry-After): not executed, retry with the same key",
    ),
];

/// A utoipa [`Modify`] that documents idempotency on the operations a layer covers: each gets
/// the key header parameter (required if [`Config::require_key`]), the layer's problem
/// responses (where the operation does not document that status itself), and the document
/// gets the rules in an `x-idempotency` extension.
///
/// ```
/// use idemkey_tower::{Config, openapi::IdempotencyOpenApi};
/// use utoipa::Modify;
///
/// let mut doc = utoipa::openapi::OpenApiBuilder::new().build();
/// IdempotencyOpenApi::new(&Config::default()).paths(["/v1/orders"]).modify(&mut doc);
/// ```
#[derive(Clone, Debug)]
pub struct IdempotencyOpenApi {
    header: String,
    methods: Vec<Method>,
    required: bool,
    paths: Option<Vec<String>>,
    rules: serde_json::Value,
}

impl IdempotencyOpenApi {
    /// Documents every operation whose method `config` honours.
    pub fn new(config: &Config) -> Self {
        Self {
            header: header_name(config),
            methods: config.methods.clone(),
            required: config.require_key,
            paths: None,
            rules: rules(config),
        }
    }

    /// Only the operations on these paths (as written in the document: `/v1/notes/{id}`).
    #[must_use]
    pub fn paths<I: IntoIterator<Item = S>, S: Into<String>>(mut self, paths: I) -> Self {
        self.paths = Some(paths.into_iter().map(Into::into).collect());
        self
    }

    /// The `x-idempotency` rules, to extend with what the application adds (its mode).
    pub fn rules(&self) -> &serde_json::Value {
        &self.rules
    }

    fn covers(&self, path: &str) -> bool {
        self.paths
            .as_ref()
            .is_none_or(|paths| paths.iter().any(|p| p == path))
    }

    fn document(&self, operation: &mut Operation) {
        let parameter = ParameterBuilder::new()
            .name(&self.header)
            .parameter_in(ParameterIn::Header)
            .required(if self.required {
                Required::True
            } else {
                Required::False
            })
            .description(Some(
                "1-255 visible ASCII characters, bare or as a quoted string",
            ))
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(KEY_PATTERN)),
            ))
            .build();
        let parameters = operation.parameters.get_or_insert_with(Vec::new);
        if !parameters
            .iter()
            .any(|p| p.name.eq_ignore_ascii_case(&self.header))
        {
            parameters.push(parameter);
        }
        for (status, description) in PROBLEMS {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(PROBLEM_SCHEMA)))
                .build();
            let response = ResponseBuilder::new()
                .description(description)
                .content("application/problem+json", content)
                .build();
            let responses = &mut operation.responses.responses;
            responses
                .entry(status.to_owned())
                .or_insert(RefOr::T(response));
        }
    }
}

impl Modify for IdempotencyOpenApi {
    fn modify(&self, openapi: &mut OpenApi) {
        let mut covered = false;
        for (path, item) in &mut openapi.paths.paths {
            if !self.covers(path) {
                continue;
            }
            for method in &self.methods {
                if let Some(operation) = operation_mut(item, method) {
                    self.document(operation);
                    covered = true;
                }
            }
        }
        if covered {
            let components = openapi.components.get_or_insert_with(Components::new);
            components
                .schemas
                .entry(PROBLEM_SCHEMA.to_owned())
                .or_insert_with(problem_schema);
        }
        let extensions = openapi.extensions.get_or_insert_with(Extensions::default);
        extensions.insert("x-idempotency".to_owned(), self.rules.clone());
    }
}

fn operation_mut<'a>(item: &'a mut PathItem, method: &Method) -> Option<&'a mut Operation> {
    match *method {
        Method::POST => item.post.as_mut(),
        Method::PATCH => item.patch.as_mut(),
        Method::PUT => item.put.as_mut(),
        Method::DELETE => item.delete.as_mut(),
        Method::GET => item.get.as_mut(),
        _ => None,
    }
}

/// The header's name as documented: `Idempotency-Key` for the default.
fn header_name(config: &Config) -> String {
    if config.key_header == crate::IDEMPOTENCY_KEY {
        "Idempotency-Key".to_owned()
    } else {
        config.key_header.as_str().to_owned()
    }
}

fn problem_schema() -> RefOr<Schema> {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    // The example follows the base in force, so an application that documents its own
    // problems shows its own address.
    let type_uri = string()
        .description(Some(
            "A URI naming the problem type, its slug last: where the type is documented",
        ))
        .examples([format!("{}key-reused", idemkey_core::problem::type_base())]);
    let schema = ObjectBuilder::new()
        .description(Some("An RFC 9457 problem, as idemkey answers"))
        .property("type", type_uri)
        .property("title", string())
        .property("status", ObjectBuilder::new().schema_type(Type::Integer))
        .property("detail", string())
        .required("type")
        .required("title")
        .required("status")
        .build();
    RefOr::T(Schema::Object(schema))
}

/// The rules a covered route follows, as published in `x-idempotency`.
pub fn rules(config: &Config) -> serde_json::Value {
    let methods: Vec<&str> = config.methods.iter().map(Method::as_str).collect();
    serde_json::json!({
        "header": header_name(config),
        "methods": methods,
        "required": config.require_key,
        "retention_seconds": config.retention.as_secs(),
        "lease_seconds": config.lease.as_secs(),
        "key": {
            "min_length": 1,
            "max_length": MAX_KEY_LEN,
            "characters": "visible ASCII (0x21-0x7E)",
            "forms": ["structured-field string (\"abc\")", "bare (abc)"],
            "scope": "actor, operation, key",
        },
        "mismatch_status": config.mismatch_status.as_u16(),
        "in_flight_status": 409,
        "replay_header": "Idempotent-Replayed",
        "body_omitted_header": "Idempotent-Body-Omitted",
    })
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathsBuilder};
    use utoipa::openapi::{OpenApiBuilder, PathItem};

    use super::*;

    fn doc() -> OpenApi {
        let operation = || OperationBuilder::new().build();
        let paths = PathsBuilder::new()
            .path("/orders", PathItem::new(HttpMethod::Post, operation()))
            .path("/orders/{id}", PathItem::new(HttpMethod::Get, operation()))
            .path("/other", PathItem::new(HttpMethod::Post, operation()))
            .build();
        OpenApiBuilder::new().paths(paths).build()
    }

    #[test]
    fn covered_operations_get_the_header_the_problems_and_the_rules() {
        let mut doc = doc();
        IdempotencyOpenApi::new(&Config::default())
            .paths(["/orders", "/orders/{id}"])
            .modify(&mut doc);
        let json = serde_json::to_value(&doc).unwrap();
        let post = &json["paths"]["/orders"]["post"];
        assert_eq!(post["parameters"][0]["name"], "Idempotency-Key");
        assert_eq!(post["parameters"][0]["in"], "header");
        assert_eq!(post["parameters"][0]["required"], true);
        assert!(post["responses"]["422"].is_object());
        assert!(
            json["paths"]["/orders/{id}"]["get"]["parameters"].is_null(),
            "GET is not honoured"
        );
        assert!(
            json["paths"]["/other"]["post"]["parameters"].is_null(),
            "not listed"
        );
        let problem = &json["components"]["schemas"][PROBLEM_SCHEMA];
        assert_eq!(
            problem["properties"]["type"]["examples"][0],
            format!("{}key-reused", idemkey_core::problem::PROBLEM_BASE)
        );
        assert_eq!(json["x-idempotency"]["retention_seconds"], 86_400);
    }
}
