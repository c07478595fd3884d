from pets_api import names


def test_object_names_follow_the_contract():
    assert names.pod_name("pets", 3) == "pets-3"
    assert names.service_name("pets") == "pets-workers"
    assert names.master_addr("pets", "ml") == "pets-0.pets-workers.ml.svc"


def test_dns1123_label():
    assert names.is_dns1123_label("a-1")
    assert not names.is_dns1123_label("A")
    assert not names.is_dns1123_label("-a")
    assert not names.is_dns1123_label("a.b")
    assert not names.is_dns1123_label("a" * 64)


def test_longest_job_name_is_bounded_by_the_service_suffix_for_small_groups():
    assert names.max_job_name_length(1) == 63 - len("-workers")
    name = "j" * names.max_job_name_length(1)
    assert names.job_name_problems(name, 1) == []
    assert names.is_dns1123_label(names.service_name(name))


def test_too_long_job_name_is_reported_with_the_limit():
    problems = names.job_name_problems("j" * 56, 2)
    assert len(problems) == 1 and "at most 55" in problems[0]


def test_many_nodes_never_shorten_below_the_service_suffix():
    # "-255" is shorter than "-workers", so the Service name stays the binding limit.
    assert names.max_job_name_length(256) == 55


def test_job_name_must_be_a_label():
    problems = names.job_name_problems("my.job", 1)
    assert problems and "DNS-1123 label" in problems[0]


def test_pod_labels_carry_index_and_attempt():
    assert names.pod_labels("pets", 1, 2) == {
        names.LABEL_JOB_NAME: "pets", names.LABEL_REPLICA_INDEX: "1", names.LABEL_ATTEMPT: "2",
        names.LABEL_MANAGED_BY: "pets-operator"}


def test_dns1123_subdomain():
    assert names.is_dns1123_subdomain("a.b-c.1")
    assert names.is_dns1123_subdomain("1abc")
    assert not names.is_dns1123_subdomain("a..b")
    assert not names.is_dns1123_subdomain(".a")
    assert not names.is_dns1123_subdomain("a.")
    assert not names.is_dns1123_subdomain("A.b")
    assert names.is_dns1123_subdomain(".".join(["a" * 63] * 4)[:253].rstrip("."))
    assert not names.is_dns1123_subdomain("a" * 254)


def test_dns1035_label():
    assert names.is_dns1035_label("abc-1")
    assert not names.is_dns1035_label("1abc")
    assert not names.is_dns1035_label("abc-")
    assert not names.is_dns1035_label("a.b")
    assert not names.is_dns1035_label("a" * 64)


def test_job_name_starting_with_a_digit_is_refused_for_its_service():
    # Pod names "1abc-0" are fine, but the Service "1abc-workers" is not a DNS-1035 label.
    assert names.is_dns1123_label("1abc-0") and not names.is_dns1035_label(names.service_name("1abc"))
    problems = names.job_name_problems("1abc", 2)
    assert len(problems) == 1
    assert "must start with a letter" in problems[0] and "'1abc-workers'" in problems[0]


def test_every_accepted_job_name_gives_valid_object_names():
    for job in ("a", "a1", "pets-demo", "j" * names.max_job_name_length(4)):
        assert names.job_name_problems(job, 4) == []
        assert names.is_dns1035_label(names.service_name(job))
        assert all(names.is_dns1123_label(names.pod_hostname(job, i)) for i in range(4))
