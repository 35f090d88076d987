"""``babelstream tenants add | list | remove``: tenants on a secured Kafka cluster, each
with a Kafka user of its own that may use only its own topics."""

from __future__ import annotations

import json

import click

from pipeline.settings import Settings


@click.group()
def tenants() -> None:
    """Tenants on Kafka: a user, ACLs and topics of their own (a secured cluster only)."""


@tenants.command()
@click.argument("tenant")
@click.option(
    "--gateway-key", is_flag=True, help="Make the tenant an API key of the HTTP gateway too."
)
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON.")
@click.pass_obj
def add(settings: Settings, tenant: str, gateway_key: bool, as_json: bool) -> None:
    """Make TENANT's Kafka user, its ACLs and its topics, and print its credentials (only
    now: the brokers keep a salted hash of the password). Run again for an existing
    tenant, it gives the user a new password (the old one stops working)."""
    from pipeline.contract.pairs import default_reply_topic, tenant_ingress_topic
    from pipeline.errors import ContractError
    from pipeline.kafka.reachability import require_kafka
    from pipeline.kafka.tenants import add_tenant, tenant_user

    try:
        tenant_user(tenant)
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="'TENANT'") from None
    require_kafka(settings.kafka)  # one line now, not a client's bootstrap timeout later
    made = add_tenant(settings.kafka, settings.replies, tenant)
    shown = {
        "tenant": made.tenant,
        "sasl_username": made.username,
        "sasl_password": made.password.get_secret_value(),
        "ingress_topic": tenant_ingress_topic(tenant),
        "reply_topic": default_reply_topic(settings.replies.prefix, tenant),
    }
    if gateway_key:
        from pipeline.cli.commands.keys import key_store

        shown["api_key"], _ = key_store(settings).add(tenant, label="babelstream tenants add")
    if as_json:
        click.echo(json.dumps(shown))
        return
    # the settings a tenant's client needs, as variables it can source
    click.echo(f"BABELSTREAM_KAFKA__SASL_USERNAME={made.username}")
    click.echo(f"BABELSTREAM_KAFKA__SASL_PASSWORD={shown['sasl_password']}")
    click.echo(f"BABELSTREAM_TENANTS__CLIENT_TENANT={made.tenant}")
    click.echo(
        f"tenant {tenant}: writes to {shown['ingress_topic']}, reads its replies from "
        f"{settings.replies.prefix}{tenant}.*"
        + (f"; gateway API key {shown['api_key']}" if gateway_key else ""),
        err=True,
    )


@tenants.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_tenants(settings: Settings, as_json: bool) -> None:
    """The tenants that have a Kafka user."""
    from pipeline.kafka.reachability import require_kafka
    from pipeline.kafka.tenants import list_tenants as listed

    require_kafka(settings.kafka)
    found = listed(settings.kafka)
    if as_json:
        click.echo(json.dumps(found))
    elif not found:
        click.echo("no tenants on Kafka (make one with `babelstream tenants add NAME`)", err=True)
    for tenant in [] if as_json else found:
        click.echo(tenant)


@tenants.command()
@click.argument("tenant")
@click.pass_obj
def remove(settings: Settings, tenant: str) -> None:
    """Take TENANT's ACLs and Kafka user away (refused from its next request on) and delete
    its ingress topic."""
    from pipeline.kafka.reachability import require_kafka
    from pipeline.kafka.tenants import remove_tenant

    require_kafka(settings.kafka)
    remove_tenant(settings.kafka, tenant)
    click.echo(f"removed tenant {tenant}", err=True)
