-- Removes a name from a collection (its object becomes garbage by the trigger).
CREATE OR REPLACE FUNCTION jobhost_remove_file(p_tenant text, p_collection text, p_name text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $function$
BEGIN
    DELETE FROM jobhost_files
    WHERE tenant = p_tenant AND collection = p_collection AND name = p_name;
    RETURN FOUND;
END
$function$;
REVOKE ALL ON FUNCTION jobhost_remove_file(TEXT, TEXT, TEXT) FROM PUBLIC;
