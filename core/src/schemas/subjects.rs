//! How a source subject is named on the target, under Confluent's subject name strategies.
//! `TopicNameStrategy` (`<topic>-key`, `<topic>-value`) and `TopicRecordNameStrategy`
//! (`<topic>-<record name>`) name a subject after its topic, so the subject follows the topic's
//! remote name; `RecordNameStrategy` subjects name no topic and keep their names.

/// The target's name for `subject`: `None` when it belongs to a topic of the source that this
/// flow does not replicate. `topics` are the source's topics; `remote` names a topic on the
/// target, or says the flow does not replicate it.
pub fn target_subject<'t>(
    subject: &str,
    topics: impl IntoIterator<Item = &'t str>,
    remote: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    // The longest topic wins: `orders-eu-value` belongs to `orders-eu`, not to `orders`.
    let owner = topics
        .into_iter()
        .filter(|t| subject.len() > t.len() + 1 && subject.starts_with(t) && subject.as_bytes()[t.len()] == b'-')
        .max_by_key(|t| t.len());
    match owner {
        Some(topic) => remote(topic).map(|r| format!("{r}{}", &subject[topic.len()..])),
        None => Some(subject.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(subject: &str) -> Option<String> {
        let topics = ["orders", "orders-eu", "payments"];
        target_subject(subject, topics, |t| (t != "payments").then(|| format!("us-east.{t}")))
    }

    #[test]
    fn subjects_follow_their_topics_remote_names() {
        assert_eq!(name("orders-value").as_deref(), Some("us-east.orders-value"));
        assert_eq!(name("orders-key").as_deref(), Some("us-east.orders-key"));
        assert_eq!(name("orders-eu-value").as_deref(), Some("us-east.orders-eu-value"), "the longest topic");
        assert_eq!(name("orders-com.acme.Order").as_deref(), Some("us-east.orders-com.acme.Order"));
    }

    #[test]
    fn record_name_subjects_keep_their_names_and_unreplicated_topics_have_none() {
        assert_eq!(name("com.acme.Order").as_deref(), Some("com.acme.Order"));
        assert_eq!(name("orders").as_deref(), Some("orders"), "a subject named like a topic, without a suffix");
        assert_eq!(name("payments-value"), None);
    }
}
