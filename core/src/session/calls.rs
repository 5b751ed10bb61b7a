//! The params of the calls every host makes, built once for every adapter's
//! `list_tools` and `call_tool`. Results stay raw: typed models are rmcp's
//! job (or the application's).

use crate::session::client::SendError;
use crate::wire::message::RawValue;

/// `tools/list`.
pub const TOOLS_LIST: &str = "tools/list";
/// `tools/call`.
pub const TOOLS_CALL: &str = "tools/call";

/// The params of `tools/list` from `cursor` (`None`: the first page, no params).
pub fn tools_list_params(cursor: Option<&str>) -> Option<Box<RawValue>> {
    let cursor = cursor?;
    let text = serde_json::json!({ "cursor": cursor }).to_string();
    RawValue::from_string(text).ok()
}

/// The params of `tools/call` of `name` with `arguments` (an object, or
/// `null` for none).
///
/// # Errors
/// `arguments` is neither an object nor `null`:
/// [`SendError::ParamsNotAnObject`] (a tool's arguments are an object).
pub fn tools_call_params(
    name: &str,
    arguments: &serde_json::Value,
) -> Result<Box<RawValue>, SendError> {
    let text = match arguments {
        serde_json::Value::Null => serde_json::json!({ "name": name }).to_string(),
        serde_json::Value::Object(_) => {
            serde_json::json!({ "name": name, "arguments": arguments }).to_string()
        }
        _ => return Err(SendError::ParamsNotAnObject),
    };
    RawValue::from_string(text).map_err(|_| SendError::ParamsNotAnObject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_params_are_what_the_spec_names() {
        assert!(tools_list_params(None).is_none());
        assert_eq!(
            tools_list_params(Some("p2")).expect("params").get(),
            r#"{"cursor":"p2"}"#
        );
        let p = tools_call_params("echo", &json!({"text": "hé \"x\""})).expect("params");
        let v: serde_json::Value = serde_json::from_str(p.get()).expect("json");
        assert_eq!(
            v,
            json!({"name": "echo", "arguments": {"text": "hé \"x\""}})
        );
        let p = tools_call_params("ping", &serde_json::Value::Null).expect("params");
        assert_eq!(p.get(), r#"{"name":"ping"}"#);
        assert!(matches!(
            tools_call_params("x", &json!([1])),
            Err(SendError::ParamsNotAnObject)
        ));
    }
}
