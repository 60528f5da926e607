//! `#[idemkey_test_support::test]`: a test function registered, with the services it needs and
//! the runtime it runs on, for the runner in `idemkey_test_support::runner::trials`. Use it through
//! `idemkey_test_support`, which re-exports it; the expansion names that crate's paths.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::punctuated::Punctuated;
use syn::{Ident, ItemFn, LitInt, LitStr, Token, bracketed, parse_macro_input};

/// Registers a test, sync or async, for `idemkey_test_support::runner::trials::main()`.
///
/// Takes `tokio::test`'s arguments (`flavor = "multi_thread"`, `worker_threads = N`; the
/// default is a current-thread runtime) and `needs = [postgres, mysql, redis, ...]`, each a variant
/// of `idemkey_test_support::runner::trials::Need` in snake case. An `#[ignore]` after it marks the
/// test ignored, as with libtest.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| options.parse(&meta));
    parse_macro_input!(args with parser);
    let mut function = parse_macro_input!(item as ItemFn);
    match expand(&options, &mut function) {
        Ok(tokens) => tokens.into(),
        Err(error) => error.to_compile_error().into(),
    }
}

/// The attribute's arguments.
#[derive(Default)]
struct Options {
    multi_thread: bool,
    worker_threads: Option<LitInt>,
    needs: Vec<Ident>,
}

impl Options {
    fn parse(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        if meta.path.is_ident("flavor") {
            let flavor: LitStr = meta.value()?.parse()?;
            self.multi_thread = match flavor.value().as_str() {
                "multi_thread" => true,
                "current_thread" => false,
                _ => return Err(syn::Error::new(flavor.span(), "unknown flavor")),
            };
        } else if meta.path.is_ident("worker_threads") {
            self.worker_threads = Some(meta.value()?.parse()?);
        } else if meta.path.is_ident("needs") {
            let value = meta.value()?;
            let content;
            bracketed!(content in value);
            let needs = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
            self.needs.extend(needs);
        } else {
            return Err(meta.error("expected `flavor`, `worker_threads` or `needs`"));
        }
        Ok(())
    }
}

fn expand(options: &Options, function: &mut ItemFn) -> syn::Result<Tokens> {
    let ignored = take_ignore(function)?;
    let signature = &function.sig;
    if !signature.inputs.is_empty() || !signature.generics.params.is_empty() {
        let message = "a test takes no arguments and no generics";
        return Err(syn::Error::new_spanned(signature, message));
    }
    let name = &signature.ident;
    let support = quote!(::idemkey_test_support);
    let needs = options.needs.iter().map(|need| {
        // `pg_server` names the variant `PgServer`: an unknown one fails to compile there.
        let variant = format_ident!("{}", camel_case(&need.to_string()), span = need.span());
        quote_spanned!(need.span()=> #support::runner::trials::Need::#variant)
    });
    let body = if signature.asyncness.is_some() {
        let runtime = match (&options.worker_threads, options.multi_thread) {
            (Some(workers), true) => {
                quote!(MultiThread { workers: ::core::option::Option::Some(#workers) })
            }
            (None, true) => quote!(MultiThread {
                workers: ::core::option::Option::None
            }),
            (Some(workers), false) => {
                let message = "`worker_threads` needs `flavor = \"multi_thread\"`";
                return Err(syn::Error::new_spanned(workers, message));
            }
            (None, false) => quote!(CurrentThread),
        };
        quote!(#support::runner::trials::Body::Async {
            runtime: #support::runner::trials::Runtime::#runtime,
            run: || ::std::boxed::Box::pin(#name()),
        })
    } else {
        quote!(#support::runner::trials::Body::Sync(#name))
    };
    let entry = Ident::new("TEST", Span::call_site());
    Ok(quote! {
        #function
        const _: () = {
            #[#support::__private::linkme::distributed_slice(#support::runner::trials::TESTS)]
            #[linkme(crate = #support::__private::linkme)]
            static #entry: #support::runner::trials::Test = #support::runner::trials::Test {
                path: ::core::concat!(::core::module_path!(), "::", ::core::stringify!(#name)),
                needs: &[#(#needs),*],
                ignored: #ignored,
                body: #body,
            };
        };
    })
}

/// Removes `#[ignore]` or `#[ignore = "why"]` from the function: the runner marks the test
/// ignored instead, as libtest would (it then runs only with `--ignored`).
fn take_ignore(function: &mut ItemFn) -> syn::Result<Tokens> {
    let Some(index) = function
        .attrs
        .iter()
        .position(|a| a.path().is_ident("ignore"))
    else {
        return Ok(quote!(::core::option::Option::None));
    };
    let attribute = function.attrs.remove(index);
    let reason = match &attribute.meta {
        syn::Meta::Path(_) => String::new(),
        syn::Meta::NameValue(pair) => match &pair.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(reason),
                ..
            }) => reason.value(),
            other => return Err(syn::Error::new_spanned(other, "expected a string")),
        },
        syn::Meta::List(list) => {
            return Err(syn::Error::new_spanned(
                list,
                "expected `#[ignore = \"why\"]`",
            ));
        }
    };
    Ok(quote!(::core::option::Option::Some(#reason)))
}

/// `pg_server` → `PgServer`.
fn camel_case(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn snake_case_needs_name_their_variants() {
        assert_eq!(super::camel_case("postgres"), "Postgres");
        assert_eq!(super::camel_case("pg_server"), "PgServer");
        assert_eq!(super::camel_case("mysql"), "Mysql");
        assert_eq!(super::camel_case("fuse"), "Fuse");
    }
}
